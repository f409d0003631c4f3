package swarm

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/p2p/protocol/identify"

	"github.com/superpeer-overlay/superpeer/experiments/latency"
)

// TestLazyHost_ClosesAConnectionWhoseIdentifyIsStuck: a peer whose identify
// handler never answers leaves its callers' identify waiting (mocknet
// ignores deadlines) and every NewStream to it failing; after stuckAfter the
// caller closes that connection and counts it. A peer that answers
// identify is not touched.
func TestLazyHost_ClosesAConnectionWhoseIdentifyIsStuck(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := New(ctx, Config{N: 3, Seed: 1, RTT: latency.NewMatrix("test", 3, func(i, j int) float64 { return 2 })})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.link.stuckAfter = 200 * time.Millisecond
	const proto = "/superpeer/test/echo/1.0.0"
	for _, p := range s.Peers {
		p.Host.SetStreamHandler(proto, func(st network.Stream) { _ = st.Close() })
	}
	// Peer 2 answers identify with silence.
	s.Peers[2].Host.SetStreamHandler(identify.ID, func(st network.Stream) {
		<-ctx.Done()
		_ = st.Reset()
	})

	a := s.Peers[0].Host
	try := func(to int) error {
		c, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		st, err := a.NewStream(c, s.Peers[to].Host.ID(), proto)
		if err == nil {
			_ = st.Close()
		}
		return err
	}
	if err := try(1); err != nil {
		t.Fatalf("NewStream to a peer that answers identify: %v", err)
	}
	var last error
	for s.StuckIdentifies() == 0 {
		if ctx.Err() != nil {
			t.Fatalf("no stuck identify noticed; last NewStream error %v", last)
		}
		if last = try(2); last == nil {
			t.Fatal("NewStream succeeded although identify never finished")
		}
		if !errors.Is(last, context.DeadlineExceeded) {
			t.Fatalf("NewStream to the silent peer: %v, want a timeout waiting for identify", last)
		}
	}
	if got := s.StuckIdentifies(); got != 1 {
		t.Errorf("%d stuck identifies counted, want 1", got)
	}
	if err := try(1); err != nil {
		t.Errorf("NewStream to the answering peer after the close: %v", err)
	}
}
