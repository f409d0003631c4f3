package vivaldi

import (
	"context"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/connmgr"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	bconnmgr "github.com/libp2p/go-libp2p/p2p/net/connmgr"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
)

// cmHost is a mocknet host with go-libp2p's connection manager (mocknet
// hosts have none).
type cmHost struct {
	host.Host
	cm *bconnmgr.BasicConnMgr
}

func (h cmHost) ConnManager() connmgr.ConnManager { return h.cm }

// tidyNet is a caller a linked to b, c, d and e (not connected), with
// one-way link latencies 5 ms to b and 40 ms to the others, and a service
// answering on each of the four.
func tidyNet(t *testing.T) (a cmHost, others []peer.ID) {
	t.Helper()
	mn := mocknet.New()
	t.Cleanup(func() { mn.Close() })
	hs := make([]host.Host, 5)
	for i := range hs {
		h, err := mn.GenPeer()
		if err != nil {
			t.Fatal(err)
		}
		hs[i] = h
	}
	for i, lat := range []time.Duration{5 * time.Millisecond, 40 * time.Millisecond, 40 * time.Millisecond, 40 * time.Millisecond} {
		l, err := mn.LinkPeers(hs[0].ID(), hs[i+1].ID())
		if err != nil {
			t.Fatal(err)
		}
		l.SetOptions(mocknet.LinkOptions{Latency: lat})
		newService(t, hs[i+1], WithInterval(0), WithSeed(int64(i)))
		others = append(others, hs[i+1].ID())
	}
	cm, err := bconnmgr.NewConnManager(100, 200)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cm.Close() })
	hs[0].Network().Notify(cm.Notifee())
	return cmHost{Host: hs[0], cm: cm}, others
}

// The service tidy (WithTidyConns) tags its near neighbour, closes the
// connection a probe opened to a candidate that did not make the set, and
// samples random peers among those it is connected to; untidy it does
// none of these.
func TestService_TidyConns(t *testing.T) {
	for _, tidy := range []bool{true, false} {
		name := map[bool]string{true: "tidy", false: "untidy"}[tidy]
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			a, o := tidyNet(t)
			b, c := o[0], o[1]
			near := DefaultNearConfig()
			near.Size, near.NearFraction, near.ProbeShare = 1, 1, 1
			s := newService(t, a, WithInterval(0), WithSeed(7), WithNearConfig(near), WithPeerSource(func() []peer.ID { return o }), WithTidyConns(tidy))
			tagged := func(p peer.ID) bool {
				ti := a.cm.GetTagInfo(p)
				return ti != nil && ti.Tags[NearTag] == NearTagValue
			}

			// b, 10 ms away, becomes the near set's one member.
			if _, err := s.Sample(ctx, b); err != nil {
				t.Fatal(err)
			}
			if got := s.nearSet(); len(got) != 1 || got[0].ID != b {
				t.Fatalf("near set %v, want b alone", got)
			}
			if tagged(b) != tidy {
				t.Fatalf("b tagged %v, want %v", tagged(b), tidy)
			}

			// c is offered as about 10 ms away; measured, it is 80 ms
			// away and stays out of the set.
			s.Offer(0.010, c, Coord{}, 0.001)
			p, k, _, err := s.Step(ctx)
			if err != nil || p != c || k != kindProbe {
				t.Fatalf("step: %v %v %v, want a probe of c", p, k, err)
			}
			if got := s.nearSet(); len(got) != 1 || got[0].ID != b {
				t.Fatalf("near set %v after the probe, want b alone", got)
			}
			// decided waits for closeProbeConns to have looked at n
			// probes' connections (tidy; untidy it never looks).
			decided := func(n uint64) ServiceStats {
				if tidy {
					waitFor(t, 10*time.Second, "the probes' connections looked at", func() bool {
						st := s.Stats()
						return st.ProbeConnsClosed+st.ProbeConnsKeptWanted+st.ProbeConnsKeptBusy >= n
					})
				}
				return s.Stats()
			}
			st := decided(1)
			connected := a.Network().Connectedness(c) == network.Connected
			if connected == tidy {
				t.Fatalf("connected to c after its probe: %v (tidy %v)", connected, tidy)
			}
			if got, want := st.ProbeConnsClosed, map[bool]uint64{true: 1, false: 0}[tidy]; got != want {
				t.Fatalf("ProbeConnsClosed %d, want %d", got, want)
			}
			if st.ProbeDials != 1 || st.CallerDials != 1 {
				t.Fatalf("dials: probes %d, callers' %d; want 1 and 1 (c's probe, b's Sample)", st.ProbeDials, st.CallerDials)
			}
			if tagged(c) {
				t.Fatal("c tagged")
			}

			// The same for d, which kad-dht's routing table holds (it
			// needs no connection), but not for e, tagged by another
			// protocol.
			d, e := o[2], o[3]
			a.cm.TagPeer(d, kadTag, 5)
			a.cm.TagPeer(e, "app", 1)
			for _, q := range []peer.ID{d, e} {
				s.Offer(0.010, q, Coord{}, 0.001)
				if p, k, _, err := s.Step(ctx); err != nil || p != q || k != kindProbe {
					t.Fatalf("step: %v %v %v, want a probe of %v", p, k, err, q)
				}
			}
			st = decided(3)
			if got, want := a.Network().Connectedness(d) == network.Connected, !tidy; got != want {
				t.Fatalf("connected to d (in kad-dht's routing table) after its probe: %v, want %v", got, want)
			}
			if a.Network().Connectedness(e) != network.Connected {
				t.Fatal("the probe closed the connection to e, which another protocol tagged")
			}
			if got, want := st.ProbeConnsClosed, map[bool]uint64{true: 2, false: 0}[tidy]; got != want {
				t.Fatalf("ProbeConnsClosed %d after d and e, want %d", got, want)
			}
			if got, want := st.ProbeConnsKeptWanted, map[bool]uint64{true: 1, false: 0}[tidy]; got != want {
				t.Fatalf("ProbeConnsKeptWanted %d after e, want %d", got, want)
			}

			// A caller's one-off sample of c closes what it opened too.
			if _, err := s.SampleOnce(ctx, c); err != nil {
				t.Fatal(err)
			}
			st = decided(4)
			if got, want := a.Network().Connectedness(c) == network.Connected, !tidy; got != want {
				t.Fatalf("connected to c after SampleOnce: %v, want %v", got, want)
			}
			if got, want := st.ProbeConnsClosed, map[bool]uint64{true: 3, false: 0}[tidy]; got != want {
				t.Fatalf("ProbeConnsClosed %d after SampleOnce, want %d", got, want)
			}

			// Random samples: among the connected peers while at least
			// Size are, tidy; over the whole source untidy.
			near.NearFraction = 0
			r := newService(t, a, WithInterval(0), WithSeed(7), WithNearConfig(near), WithPeerSource(func() []peer.ID { return o }), WithProtocolPrefix("/tidy-random"), WithTidyConns(tidy))
			picked := map[peer.ID]int{}
			for range 20 {
				p, k, ok := r.pick()
				if !ok || k != kindRandom {
					t.Fatalf("pick %v %v %v, want a random peer", p, k, ok)
				}
				picked[p]++
			}
			// Connected now: b and e, and tidy alone, c and d too.
			off := 0
			for p := range picked {
				if a.Network().Connectedness(p) != network.Connected {
					off++
				}
			}
			if tidy && (off > 0 || len(picked) != 2) {
				t.Fatalf("tidy random picks %v, want b and e alone (the ones connected)", picked)
			}
			if !tidy && len(picked) < 3 {
				t.Fatalf("untidy random picks %v, want the whole source", picked)
			}
			r.Close()

			// Forgetting b, and closing, untag it.
			s.ForgetPeer(b)
			if tagged(b) {
				t.Fatal("b still tagged once forgotten")
			}
			if _, err := s.Sample(ctx, b); err != nil {
				t.Fatal(err)
			}
			if tagged(b) != tidy {
				t.Fatalf("b tagged %v once sampled again, want %v", tagged(b), tidy)
			}
			s.Close()
			if tagged(b) {
				t.Fatal("b still tagged once the service closed")
			}
		})
	}
}
