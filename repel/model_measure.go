package repel

import (
	"math"
	"time"
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
}

// misfits is the set of attached clients whose coordinates put them
// farther from this node than its own standing measurement of their RTT
// allows (Config.CoordCheck), emitting EventCoordMisfit when a held
// token's client first is. A peer this node has not measured fits. When
// most of the measured clients misfit, the fault is taken to be this
// node's own coordinate, and none is left out.
func (n *Node) misfits(now time.Time) map[string]bool {
	k := n.cfg.CoordCheck
	if k <= 0 || !n.coordOK() {
		return nil
	}
	floor := n.cfg.CoordFloor.Seconds()
	var out map[string]bool
	measured := 0
	for _, p := range n.peers {
		if !p.Attached || !validCoord(p.Coord) || len(p.Coord.Vec) != len(n.coord.Vec) {
			continue
		}
		r, ok := n.MeasuredRTT(now, p.ID)
		if !ok {
			continue
		}
		measured++
		if n.coord.DistanceTo(p.Coord) > (1+k)*r.Seconds()+floor {
			if out == nil {
				out = map[string]bool{}
			}
			out[p.ID] = true
		}
	}
	if 2*len(out) > measured {
		out = nil
	}
	for _, p := range n.peers {
		pr, ok := n.probes[p.ID]
		if !ok || pr.misfit == out[p.ID] {
			continue
		}
		pr.misfit = out[p.ID]
		n.probes[p.ID] = pr
		if pr.misfit && n.held != nil {
			tok := n.held.tok
			tok.Holder = p.ID
			n.event(EventCoordMisfit, tok)
		}
	}
	return out
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
		if !want[id] && now.Sub(p.asked) >= n.cfg.MoveTimeout {
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
