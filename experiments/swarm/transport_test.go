package swarm

import (
	"context"
	"math/rand"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/superpeer-overlay/superpeer/experiments/latency"
)

// bothOf runs f on a and b at once and fails on either's error.
func bothOf(t *testing.T, a, b *Swarm, f func(*Swarm) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for k, s := range []*Swarm{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[k] = f(s)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestSwarm_RealSocketsOneOverlayAcrossRanges: two swarms on real sockets
// (loopback), each running half of the same n peers, the second joining
// through the first's first peer, are one overlay: every peer holds its
// XOR-nearest whichever swarm runs it, lookups from either are exact over
// all keys, and the prefix method selects the superpeers all keys call for,
// with clients attached across the two.
func TestSwarm_RealSocketsOneOverlayAcrossRanges(t *testing.T) {
	for _, tr := range []Transport{TCP, QUIC} {
		t.Run(string(tr), func(t *testing.T) {
			n, half, S := 30, 15, 4
			// RANGE_N=120 tries it larger (one process holds both ends of
			// every connection: a few hundred peers need more open files
			// than a default limit gives).
			if v := os.Getenv("RANGE_N"); v != "" {
				n, _ = strconv.Atoi(v)
				half = n / 2
			}
			m, err := latency.Builtin(latency.Default)
			if err != nil {
				t.Fatal(err)
			}
			pl, err := latency.Place(m.Filled(), n, 5)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			cfg := Config{N: n, Seed: 5, RTT: pl, HostOf: pl.Host, Transport: tr, To: half}
			a, err := New(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			for _, addr := range a.Addrs(0) {
				if !strings.HasPrefix(addr.String(), "/ip4/127.0.0.1/") {
					t.Fatalf("peer 0 listens on %s, not loopback", addr)
				}
			}
			info, err := peer.AddrInfoFromP2pAddr(a.Addrs(0)[0])
			if err != nil {
				t.Fatal(err)
			}
			cfg.From, cfg.To, cfg.Bootstrap = half, n, []peer.AddrInfo{*info}
			b, err := New(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if len(a.Live()) != half || len(b.Live()) != n-half || len(a.Everyone()) != n {
				t.Fatalf("live %d and %d, everyone %d", len(a.Live()), len(b.Live()), len(a.Everyone()))
			}
			if err := a.Join(ctx); err != nil {
				t.Fatal(err)
			}
			if err := b.Join(ctx); err != nil {
				t.Fatal(err)
			}
			bothOf(t, a, b, func(s *Swarm) error { return s.WaitConverged(ctx, 10) })
			for k, s := range []*Swarm{a, b} {
				if c := s.CheckLookups(ctx, 20, true, rand.New(rand.NewSource(int64(k)))); c.Exact != c.Tried {
					t.Fatalf("swarm %d: %d of %d lookups exact", k, c.Exact, c.Tried)
				}
			}
			across := 0
			for _, i := range a.Live() {
				for _, q := range a.Peers[i].Host.Network().Peers() {
					if j := a.Index(q); j >= half {
						across++
					}
				}
			}
			if across == 0 {
				t.Fatal("no peer of the first swarm is connected to one of the second")
			}

			bothOf(t, a, b, func(s *Swarm) error { return s.StartPrefix(ctx, prefixOptions(S, 0)...) })
			bothOf(t, a, b, func(s *Swarm) error {
				_, err := s.WaitPrefix(ctx, s.SelectionStart())
				return err
			})
			sa, sb := a.PrefixState(), b.PrefixState()
			if len(sa.Expected) != S || !slices.Equal(sa.Expected, sb.Expected) {
				t.Fatalf("expected superpeers %v and %v, want the same %d", sa.Expected, sb.Expected, S)
			}
			got := append(append([]int(nil), sa.Superpeers...), sb.Superpeers...)
			slices.Sort(got)
			if !slices.Equal(got, sa.Expected) {
				t.Fatalf("superpeers %v + %v, expected %v", sa.Superpeers, sb.Superpeers, sa.Expected)
			}
			remote := 0
			for _, st := range []PrefixState{sa, sb} {
				for i, sp := range st.Assignment {
					if sp >= 0 && sp != i && (i < half) != (sp < half) {
						remote++
					}
				}
			}
			if remote == 0 {
				t.Fatal("no client attached to a superpeer of the other swarm")
			}
			t.Logf("%s: %d connections across, %d clients served across", tr, across, remote)
		})
	}
}

func TestNew_RangesNeedRealSockets(t *testing.T) {
	m, err := latency.Builtin(latency.Default)
	if err != nil {
		t.Fatal(err)
	}
	pl, err := latency.Place(m.Filled(), 10, 1)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, c := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"range on mocknet", Config{From: 2}, "real sockets"},
		{"bootstrap on mocknet", Config{Bootstrap: []peer.AddrInfo{{ID: "x"}}}, "real sockets"},
		{"empty range", Config{Transport: TCP, From: 5, To: 5}, "not a range"},
		{"range past n", Config{Transport: TCP, To: 11}, "not a range"},
		{"held in a range", Config{Transport: TCP, To: 5, Hold: 1}, "whole swarm"},
		{"unknown transport", Config{Transport: "carrier-pigeon"}, "want mocknet, tcp or quic"},
		{"listen on a name", Config{Transport: TCP, ListenIP: "localhost"}, "not an IP address"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := c.cfg
			cfg.N, cfg.Seed, cfg.RTT = 10, 1, pl
			s, err := New(ctx, cfg)
			if err == nil {
				s.Close()
				t.Fatal("built")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q, want it to say %q", err, c.want)
			}
		})
	}
	s, err := New(ctx, Config{N: 10, Seed: 1, RTT: pl, Transport: TCP})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Dilate(2); err == nil || !strings.Contains(err.Error(), "mocknet") {
		t.Fatalf("dilating real sockets: %v", err)
	}
}
