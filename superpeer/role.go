package superpeer

import (
	"context"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// Role is what a peer is in the overlay.
type Role int

const (
	// Unknown is the role before the first decision.
	Unknown Role = iota
	// Client is a peer served by a superpeer.
	Client
	// Superpeer is a peer that serves clients.
	Superpeer
)

func (r Role) String() string {
	switch r {
	case Client:
		return "client"
	case Superpeer:
		return "superpeer"
	default:
		return "unknown"
	}
}

// Change tells a peer's role or superpeer changed.
type Change struct {
	Role Role
	// Superpeer is the peer this one is attached to (itself when it is a
	// superpeer; empty when it is served by nobody yet).
	Superpeer peer.ID
	At        time.Time
	// Reason says why, for logs.
	Reason string
}

// Selector is a superpeer selection method running on one peer. Every
// method implements it (Method.New builds one), so an application can embed
// any on its own host and DHT.
type Selector interface {
	// Start begins selecting; it returns once the selector runs (the first
	// decision arrives as a Change).
	Start(ctx context.Context) error
	// Role is the peer's current role.
	Role() Role
	// Superpeer is the peer this one is served by: itself when it is a
	// superpeer, empty while it is unserved.
	Superpeer() peer.ID
	// Subscribe delivers every change from now on; cancel stops it. A slow
	// subscriber loses intermediate changes, never the latest.
	Subscribe() (changes <-chan Change, cancel func())
	// Attach is the peer's attach protocol: its clients while it is a
	// superpeer, its capacity and counters.
	Attach() *Attach
	// Close stops the selector.
	Close() error
}

// notifier keeps the current (role, superpeer) and fans changes out to
// subscribers. Its channels hold one change: a slow reader sees the latest.
type notifier struct {
	mu        sync.Mutex
	role      Role
	superpeer peer.ID
	subs      map[chan Change]struct{}
}

func (n *notifier) state() (Role, peer.ID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.role, n.superpeer
}

// set records a new state and tells subscribers if it differs.
func (n *notifier) set(role Role, sp peer.ID, reason string, now time.Time) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if role == n.role && sp == n.superpeer {
		return false
	}
	n.role, n.superpeer = role, sp
	c := Change{Role: role, Superpeer: sp, At: now, Reason: reason}
	for ch := range n.subs {
		select {
		case ch <- c:
		default:
			// Replace the stale change with the latest.
			select {
			case <-ch:
			default:
			}
			ch <- c
		}
	}
	return true
}

func (n *notifier) subscribe() (<-chan Change, func()) {
	ch := make(chan Change, 1)
	n.mu.Lock()
	if n.subs == nil {
		n.subs = map[chan Change]struct{}{}
	}
	n.subs[ch] = struct{}{}
	n.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			n.mu.Lock()
			delete(n.subs, ch)
			n.mu.Unlock()
		})
	}
}
