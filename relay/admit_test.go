package relay

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

func tcpHost(t *testing.T) host.Host {
	t.Helper()
	h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// TestAdmission_ClientsFirst: the superpeer's own clients are always
// admitted; other peers only while they and the clients leave a slot
// free; a renewal does not count its own slot twice; a peer that
// disconnected frees its slot.
func TestAdmission_ClientsFirst(t *testing.T) {
	h := tcpHost(t)
	o1, o2, c := tcpHost(t), tcpHost(t), tcpHost(t)
	ctx := context.Background()
	for _, x := range []host.Host{o1, o2, c} {
		if err := x.Connect(ctx, peer.AddrInfo{ID: h.ID(), Addrs: h.Addrs()}); err != nil {
			t.Fatal(err)
		}
	}
	var refused atomic.Uint64
	a := newAdmission(h, func() []peer.ID { return []peer.ID{c.ID()} }, 2, &refused)
	step := func(p peer.ID, want bool, what string) {
		t.Helper()
		if got := a.AllowReserve(p, nil); got != want {
			t.Errorf("%s: AllowReserve %v, want %v", what, got, want)
		}
	}
	step(o1.ID(), true, "a first other peer, one client: 0 + 1 < 2")
	step(o2.ID(), false, "a second other peer: 1 + 1 = 2")
	step(c.ID(), true, "the client, whatever the others hold")
	step(o1.ID(), true, "the first other peer's renewal")
	if refused.Load() != 1 {
		t.Errorf("refused %d, want 1", refused.Load())
	}
	// o1 goes: its slot is free again.
	if err := o1.Close(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for h.Network().Connectedness(o1.ID()) == network.Connected {
		if time.Now().After(deadline) {
			t.Fatal("o1 still connected 10 s after closing")
		}
		time.Sleep(10 * time.Millisecond)
	}
	step(o2.ID(), true, "the second other peer once the first has gone")
	if !a.AllowConnect("", nil, "") {
		t.Error("AllowConnect refuses")
	}
}
