package relay

import (
	"sync"
	"sync/atomic"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// admission is a superpeer relay's rule for reservations: its own clients
// first. An attached client is always admitted (the relay's bound, the
// attach capacity, leaves room for every one of them); another peer only
// while the others it holds and its own clients leave a slot free:
//
//	others + clients < capacity
//
// where others counts the non-clients admitted before that still have a
// connection to this host (a reservation lives no longer than its
// connection). Without it, other groups' clients taking a superpeer as
// their second relay could fill its slots before its own clients ask,
// and shut them out of their own superpeer.
type admission struct {
	h        host.Host
	clients  func() []peer.ID
	capacity int

	// refused counts the non-clients refused for want of room.
	refused *atomic.Uint64

	mu     sync.Mutex
	others map[peer.ID]struct{}
}

func newAdmission(h host.Host, clients func() []peer.ID, capacity int, refused *atomic.Uint64) *admission {
	return &admission{h: h, clients: clients, capacity: capacity, refused: refused, others: map[peer.ID]struct{}{}}
}

// AllowReserve is relayv2.ACLFilter's.
func (a *admission) AllowReserve(p peer.ID, _ ma.Multiaddr) bool {
	clients := a.clients()
	for _, c := range clients {
		if c == p {
			a.mu.Lock()
			delete(a.others, p) // a client now, counted as one
			a.mu.Unlock()
			return true
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for o := range a.others {
		switch {
		case a.h.Network().Connectedness(o) != network.Connected:
			delete(a.others, o)
		case o != p:
			n++
		}
	}
	if n+len(clients) >= a.capacity {
		a.refused.Add(1)
		return false
	}
	a.others[p] = struct{}{}
	return true
}

// AllowConnect is relayv2.ACLFilter's: a reserved peer may be reached by
// anyone.
func (a *admission) AllowConnect(peer.ID, ma.Multiaddr, peer.ID) bool { return true }
