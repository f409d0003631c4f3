package repel

import (
	"time"

	"github.com/superpeer-overlay/superpeer/internal/census"
)

// The token count under Config.Fraction: the node's census
// (internal/census) fed by the reports on the holders' announcements.

// Count is the token count this node holds and the version that set it
// (Config.Tokens and 0 until it hears or makes another; without a Fraction
// always Config.Tokens). Its report fields are zero.
func (n *Node) Count() Count {
	if n.cen == nil {
		return Count{S: len(n.tokens)}
	}
	v := n.cen.Value()
	return Count{S: v.S, Version: v.Version}
}

// limit is the count a message's token ID must stay under: this node's,
// or the message's when it carries a fresher one that the node will take.
func (n *Node) limit(c Count) int {
	s := len(n.tokens)
	if n.cen != nil && c.S > s && (census.Value{S: c.S, Version: c.Version}).Beats(n.cen.Value()) {
		s = c.S
	}
	return s
}

// retired reports whether t is a token that a count retired: one past the
// count it carries itself (the last announcement of the holder that
// proposed that count), or one past this node's count sent under an older
// count or this very one.
func (n *Node) retired(t Token) bool {
	if n.cen == nil || int(t.ID) >= n.cfg.maxTokens() || !validCount(t.Count, n.cfg.maxTokens()) {
		return false
	}
	if t.Count.S == 0 {
		// No count: a version sent before its holder's first
		// announcement. Past this node's count it says nothing this node
		// can use (the holder's count comes with its next announcement);
		// refusing it counted a drop between honest peers when the count
		// had just fallen.
		return int(t.ID) >= len(n.tokens)
	}
	if int(t.ID) >= t.Count.S {
		return true
	}
	if int(t.ID) < len(n.tokens) {
		return false
	}
	return !(census.Value{S: t.Count.S, Version: t.Count.Version}).Beats(n.cen.Value())
}

// hearCount takes the sender's count if it is fresher than this node's.
func (n *Node) hearCount(now time.Time, c Count) {
	if n.cen == nil || c.S == 0 {
		return
	}
	if n.cen.Observe(now, census.Value{S: c.S, Version: c.Version}) {
		n.resize(now)
	}
}

// hearReport records the report an announcement of t carries (news only:
// observe calls it for a fresher version or heartbeat).
func (n *Node) hearReport(now time.Time, t Token) {
	c := t.Count
	if n.cen == nil || c.S == 0 || c.Peers == 0 {
		return
	}
	n.cen.Merge(now, census.Value{S: c.S, Version: c.Version}, []census.Entry{{
		ID: t.Holder, Peers: c.Peers, Share: 1 / float64(c.S), Version: c.Version, Seq: c.Seq, Estimate: c.Estimate,
	}})
	if len(n.tokens) != n.cen.Value().S {
		n.resize(now)
	}
}

// report is what this holder's announcement carries: its count and, under
// a Fraction, once its token has settled (its clients have found it), its
// report of itself and its attached clients for a 1/S share.
func (n *Node) report(now time.Time) Count {
	if n.cen == nil {
		return Count{}
	}
	v := n.cen.Value()
	if !n.held.settled {
		n.cen.Withdraw()
		return Count{S: v.S, Version: v.Version}
	}
	peers := 1
	for _, p := range n.peers {
		if p.Attached && p.ID != n.id {
			peers++
		}
	}
	n.cen.Report(now, peers, 1/float64(v.S))
	c := Count{S: v.S, Version: v.Version}
	if e, ok := n.cen.Own(); ok {
		c.Peers, c.Seq, c.Estimate = e.Peers, e.Seq, e.Estimate
	}
	return c
}

// countTick lets a settled holder propose a new count; the node takes it
// at once and announces it.
func (n *Node) countTick(now time.Time) {
	if n.cen == nil || !n.held.settled {
		return
	}
	// Only the holders of the tokens as this node knows them stand for a
	// share: a report of a peer whose token moved on, was fenced or
	// retired by a path that did not replace it (a holder that missed its
	// move's ack and kept announcing its old version, say) counts no more.
	holders := n.holders(now)
	for _, e := range n.cen.Digest(now) {
		if !holders[e.ID] {
			n.cen.Forget(e.ID)
		}
	}
	if _, changed := n.cen.Tick(now); !changed {
		return
	}
	// Announce the new count before taking it: it may retire this very
	// token, and a holder no longer announces.
	n.announce(now)
	n.event(EventCounted, n.held.tok)
	n.resize(now)
}

// resize makes the token table fit the count held: the tokens a larger
// count adds are ones nobody has heard of yet (minted after JoinWait by the
// XOR-closest peer to each name), and a smaller count retires the tokens
// with the highest IDs — one at a time as the count moves by one — whose
// holders drop them.
func (n *Node) resize(now time.Time) {
	s := n.cen.Value().S
	for len(n.tokens) < s {
		n.tokens = append(n.tokens, tableEntry{lastHeard: now})
	}
	if len(n.tokens) <= s {
		return
	}
	for _, e := range n.tokens[s:] {
		if e.known && e.tok.Holder != n.id {
			n.cen.Forget(e.tok.Holder)
		}
	}
	n.tokens = n.tokens[:s:s]
	if n.job != nil && n.job.tok.ID >= uint32(s) {
		n.job = nil
	}
	if h := n.held; h != nil && h.tok.ID >= uint32(s) {
		n.drop(EventRetired, h.tok)
	}
}
