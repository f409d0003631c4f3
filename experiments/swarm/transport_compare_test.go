package swarm

import (
	"context"
	"math/rand"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
	"github.com/libp2p/go-libp2p/x/simlibp2p"
	"github.com/marcopolo/simnet"
)

// TestTransportCompare measures what one host and one connection cost on
// each of go-libp2p's simulated networks: n hosts, each dialling d random
// others, then RSS, heap and goroutines per host. It is an experiment, not
// a check: SWARM_TRANSPORT_COMPARE=1 go test ./experiments/swarm -run
// TransportCompare -v. It measured the choice of mocknet for swarms.
func TestTransportCompare(t *testing.T) {
	if os.Getenv("SWARM_TRANSPORT_COMPARE") == "" {
		t.Skip("set SWARM_TRANSPORT_COMPARE=1 to run")
	}
	const n, d = 300, 20
	for _, kind := range []string{"mocknet", "simnet"} {
		runtime.GC()
		base := heapAndGoroutines()
		start := time.Now()
		hosts, link, closeAll := buildHosts(t, kind, n)
		rng := rand.New(rand.NewSource(1))
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		var conns int
		for i, h := range hosts {
			for k := 0; k < d; k++ {
				j := rng.Intn(n)
				if j == i {
					continue
				}
				link(i, j)
				if err := h.Connect(ctx, peer.AddrInfo{ID: hosts[j].ID(), Addrs: hosts[j].Addrs()}); err != nil {
					t.Fatalf("%s: connect %d→%d: %v", kind, i, j, err)
				}
				conns++
			}
		}
		cancel()
		took := time.Since(start)
		runtime.GC()
		after := heapAndGoroutines()
		t.Logf("%s: %d hosts, %d dials in %v: %.1f KiB heap and %.1f goroutines per host, RSS %.0f MiB",
			kind, n, conns, took.Round(time.Millisecond), float64(after.heap-base.heap)/1024/n,
			float64(after.goroutines-base.goroutines)/n, float64(RSS())/(1<<20))
		closeAll()
	}
}

type usage struct {
	heap       uint64
	goroutines int
}

func heapAndGoroutines() usage {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return usage{ms.HeapInuse, runtime.NumGoroutine()}
}

// buildHosts makes n hosts; link(i, j) readies a dial from i to j (mocknet
// needs a link first: made on demand as the swarm does, not n² up front).
func buildHosts(t *testing.T, kind string, n int) ([]host.Host, func(i, j int), func()) {
	t.Helper()
	if kind == "mocknet" {
		mn := mocknet.New()
		var hs []host.Host
		for i := 0; i < n; i++ {
			sk, _ := identity(1, i)
			h, err := mn.AddPeer(sk, addr(i))
			if err != nil {
				t.Fatal(err)
			}
			hs = append(hs, h)
		}
		link := func(i, j int) {
			if len(mn.LinksBetweenPeers(hs[i].ID(), hs[j].ID())) == 0 {
				if _, err := mn.LinkPeers(hs[i].ID(), hs[j].ID()); err != nil {
					t.Fatal(err)
				}
			}
		}
		return hs, link, func() { mn.Close() }
	}
	nw, meta, err := simlibp2p.SimpleLibp2pNetwork([]simlibp2p.NodeLinkSettingsAndCount{{
		LinkSettings: simnet.NodeBiDiLinkSettings{
			Downlink: simnet.LinkSettings{BitsPerSecond: 100 * simlibp2p.OneMbps},
			Uplink:   simnet.LinkSettings{BitsPerSecond: 100 * simlibp2p.OneMbps},
		},
		Count: n,
	}}, simnet.StaticLatency(5*time.Millisecond), simlibp2p.NetworkSettings{UseBlankHost: true})
	if err != nil {
		t.Fatal(err)
	}
	nw.Start()
	return meta.Nodes, func(int, int) {}, func() {
		for _, h := range meta.Nodes {
			h.Close()
		}
		nw.Close()
	}
}
