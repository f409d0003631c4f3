package repel

import (
	"math"
	"time"

	"github.com/superpeer-overlay/superpeer/vivaldi"
)

// maxProbesPerTick bounds the measurements one Tick asks for, so that a
// holder that just took a token (or many clients) spreads them out.
const maxProbesPerTick = 64

// probe is what a holder measured of another peer's RTT.
type probe struct {
	rtt   float64   // seconds; +Inf if the measurement failed
	at    time.Time // when measured (zero: never)
	asked time.Time // when last asked for (zero: never)
	// misfit: the peer's coordinate last disagreed with rtt
	// (Config.CoordCheck); EventCoordMisfit was emitted then if this
	// node held a token.
	misfit bool
	// candidate: asked for as a candidate to move the token to
	// (Config.CoordCheck); kept for ProbeTTL, so that a candidate that
	// misfits is not measured again at every move check.
	candidate bool
}

// misfits is the set of attached clients whose coordinates put them
// farther from this node than its own standing measurement of their RTT
// allows (Config.CoordCheck), emitting EventCoordMisfit when a held
// token's client first is. A peer this node has not measured fits. When
// most of the measured clients misfit, the fault is taken to be this
// node's own coordinate, and none is left out. trusted reports that the
// check is on and this node's coordinate is not at fault: only then are
// candidates checked too (checkCandidate).
func (n *Node) misfits(now time.Time) (out map[string]bool, trusted bool) {
	if n.cfg.CoordCheck <= 0 || !n.coordOK() {
		return nil, false
	}
	var measured []string
	for _, p := range n.peers {
		if !p.Attached || !validCoord(p.Coord) || len(p.Coord.Vec) != len(n.coord.Vec) {
			continue
		}
		r, ok := n.MeasuredRTT(now, p.ID)
		if !ok {
			continue
		}
		measured = append(measured, p.ID)
		if !n.coordFits(p.Coord, r) {
			if out == nil {
				out = map[string]bool{}
			}
			out[p.ID] = true
		}
	}
	trusted = 2*len(out) <= len(measured)
	if !trusted {
		out = nil
	}
	for _, id := range measured {
		n.markMisfit(id, out[id])
	}
	return out, trusted
}

// coordFits reports whether c, a peer's coordinate, puts it no farther
// from this node than (1+CoordCheck)·rtt + CoordFloor, rtt being what
// this node measured to it.
func (n *Node) coordFits(c vivaldi.Coord, rtt time.Duration) bool {
	return n.coord.DistanceTo(c) <= (1+n.cfg.CoordCheck)*rtt.Seconds()+n.cfg.CoordFloor.Seconds()
}

// markMisfit records whether peer id's coordinate misfits its measured
// RTT, emitting EventCoordMisfit (the held token with id as Holder) when
// it starts to while this node holds a token.
func (n *Node) markMisfit(id string, misfit bool) {
	pr, ok := n.probes[id]
	if !ok || pr.misfit == misfit {
		return
	}
	pr.misfit = misfit
	n.probes[id] = pr
	if misfit && n.held != nil {
		tok := n.held.tok
		tok.Holder = id
		n.event(EventCoordMisfit, tok)
	}
}

// checkCandidate is the coordinate check (Config.CoordCheck) of a peer
// the held token is about to be offered to: fit, measured and fitting;
// wait, not measured yet — it is asked for (Ready.Probes) and the next
// move check comes as soon as the answer does (Measured). A candidate
// that misfits gets EventCoordMisfit once, as a client does; one whose
// measurement failed within ProbeTTL is passed over, not asked again.
func (n *Node) checkCandidate(now time.Time, c Peer) (fit, wait bool) {
	if r, ok := n.MeasuredRTT(now, c.ID); ok {
		fit = n.coordFits(c.Coord, r)
		n.markMisfit(c.ID, !fit)
		return fit, false
	}
	pr := n.probes[c.ID]
	if !pr.at.IsZero() && math.IsInf(pr.rtt, 1) && now.Sub(pr.at) < n.cfg.ProbeTTL {
		return false, false
	}
	pr.candidate = true
	if pr.asked.IsZero() || now.Sub(pr.asked) >= n.cfg.MoveTimeout {
		pr.asked = now
		n.ready.Probes = append(n.ready.Probes, c.ID)
	}
	n.probes[c.ID] = pr
	n.held.awaiting = c.ID
	return false, true
}

// Measured tells the node the RTT to peer id that it asked for in
// Ready.Probes (ok false: the measurement failed). It sends nothing; the
// next announcement and move decision use it.
func (n *Node) Measured(now time.Time, id string, rtt time.Duration, ok bool) {
	p := n.probes[id]
	p.rtt, p.at = max(rtt, 0).Seconds(), now
	if !ok {
		p.rtt = math.Inf(1)
	}
	if n.measuredForJob(id, p.rtt) {
		return
	}
	n.probes[id] = p
	if h := n.held; h != nil && h.awaiting == id {
		h.awaiting, h.nextCheck = "", now
	}
}

// MeasuredRTT is the node's standing measurement of peer id: one younger
// than ProbeTTL that did not fail.
func (n *Node) MeasuredRTT(now time.Time, id string) (time.Duration, bool) {
	p, ok := n.probes[id]
	if !ok || p.at.IsZero() || now.Sub(p.at) >= n.cfg.ProbeTTL || math.IsInf(p.rtt, 0) {
		return 0, false
	}
	return time.Duration(p.rtt * float64(time.Second)), true
}

// probe asks, while this node holds a token, for the RTT of every other
// live holder (Config.SiteRTT) and of every attached client (the digest's
// RTTs) it has no standing measurement of — none younger than ProbeTTL,
// and none asked for within MoveTimeout — holders first, at most
// maxProbesPerTick at a time. It forgets the measurements of peers that
// are neither.
func (n *Node) probe(now time.Time) {
	if n.cfg.ProbeTTL <= 0 {
		return
	}
	want := make(map[string]bool, len(n.tokens))
	var ids []string
	add := func(id string) {
		if id != n.id && !want[id] {
			want[id] = true
			ids = append(ids, id)
		}
	}
	for i := range n.tokens {
		if e := n.tokens[i]; e.known && now.Sub(e.lastHeard) < n.cfg.DeadAfter {
			add(e.tok.Holder)
		}
	}
	for _, p := range n.peers {
		if p.Attached {
			add(p.ID)
		}
	}
	for id, p := range n.probes {
		keep := want[id] || now.Sub(p.asked) < n.cfg.MoveTimeout ||
			(p.candidate && !p.at.IsZero() && now.Sub(p.at) < n.cfg.ProbeTTL)
		if !keep {
			delete(n.probes, id)
		}
	}
	asked := 0
	for _, id := range ids {
		if asked == maxProbesPerTick {
			return
		}
		p := n.probes[id]
		fresh := !p.at.IsZero() && now.Sub(p.at) < n.cfg.ProbeTTL
		if fresh || (!p.asked.IsZero() && now.Sub(p.asked) < n.cfg.MoveTimeout) {
			continue
		}
		p.asked = now
		n.probes[id] = p
		n.ready.Probes = append(n.ready.Probes, id)
		asked++
	}
}

// sharesSite reports whether other, a live token's version, is held at
// this node's site (measured RTT below SiteRTT) and beats mine in the
// fencing order: then mine is the one that leaves.
func (n *Node) sharesSite(now time.Time, other, mine Token) bool {
	if n.cfg.SiteRTT <= 0 || other.Holder == n.id || !other.Beats(mine) {
		return false
	}
	rtt, ok := n.MeasuredRTT(now, other.Holder)
	return ok && rtt < n.cfg.SiteRTT
}
