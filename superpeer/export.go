package superpeer

import (
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// Notifier keeps a selector's current (role, superpeer) and fans changes out
// to subscribers, for selectors outside this package (repel). The zero value
// is ready; a slow subscriber sees the latest change, never a stale one.
type Notifier struct{ n notifier }

// State is the current role and superpeer.
func (n *Notifier) State() (Role, peer.ID) { return n.n.state() }

// Set records a new state and tells subscribers if it differs; it reports
// whether it did.
func (n *Notifier) Set(role Role, sp peer.ID, reason string, now time.Time) bool {
	return n.n.set(role, sp, reason, now)
}

// Subscribe delivers every change from now on; cancel stops it.
func (n *Notifier) Subscribe() (<-chan Change, func()) { return n.n.subscribe() }
