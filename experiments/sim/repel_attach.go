package sim

import (
	"math"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/superpeer-overlay/superpeer/experiments/latency"
	"github.com/superpeer-overlay/superpeer/experiments/metrics"
	"github.com/superpeer-overlay/superpeer/repel"
	"github.com/superpeer-overlay/superpeer/superpeer"
	"github.com/superpeer-overlay/superpeer/vivaldi"
)

// AttachRule is how the simulated clients of the token method choose a
// holder.
type AttachRule uint8

const (
	// AttachSelector is repel.Selector's attacher (repel/
	// selector_attach.go) at every ViewEvery, one client after another in a
	// seeded order, with the live selector's repel.Chooser: the client
	// measures the holders its chooser asks for (here their true RTT from
	// the latency space), then asks the holders in the chooser's order —
	// its current holder first while it is within Switch of the best, then
	// by measured RTT where known and predicted RTT otherwise — and takes
	// the first that accepts. A holder refuses a new client when it serves
	// Capacity.
	AttachSelector AttachRule = iota
	// AttachPredicted is the simulator's earlier rule: every ViewEvery
	// every client is sent afresh to the holder nearest in predicted RTT,
	// with no capacity and no measurement.
	AttachPredicted
)

func (r AttachRule) String() string {
	switch r {
	case AttachSelector:
		return "selector"
	case AttachPredicted:
		return "predicted"
	}
	return "AttachRule(?)"
}

// AttachStats count what the simulated clients did under AttachSelector.
type AttachStats struct {
	// Requests are attach requests (a renewal of the current holder
	// included); RefusedFull those a full holder refused.
	Requests    int `json:"requests"`
	RefusedFull int `json:"refused_full"`
	// Probes are RTT measurements of holders before choosing (one Vivaldi
	// exchange each in the live selector).
	Probes int `json:"probes"`
	// Explored are the measurements of holders the clients had not
	// measured, made after asking (repel.AttachConfig.Explore).
	Explored int `json:"explored"`
	// Switches count clients that left a live holder for another;
	// Unattached, clients that every holder refused (in the last round).
	Switches   int `json:"switches"`
	Displaced  int `json:"displaced"`
	Unattached int `json:"unattached"`
	// DisplacedByLiars are the honest clients displaced by a regret liar
	// (RepelOptions.RegretLiars); Capped, the regrets the holders' bound
	// lowered (repel.AttachConfig.RegretBound).
	DisplacedByLiars int `json:"displaced_by_liars"`
	Capped           int `json:"regrets_capped"`
}

// attacher is the clients' side of the attach protocol under
// AttachSelector — each client's repel.Chooser, the live selector's — and
// the holders' — each holder's superpeer.AttachTable, the live
// superpeer.Attach's.
type attacher struct {
	rtt      latency.RTTs
	coords   []vivaldi.Coord
	ids      []string
	index    map[string]int
	capacity int           // 0: unbounded
	displace time.Duration // superpeer.WithDisplace
	cfg      repel.AttachConfig

	att    []int // each peer's holder, -1 for none
	ch     []*repel.Chooser
	served map[int]*superpeer.AttachTable // each holder's clients
	stats  AttachStats

	displaced []int  // clients displaced in this round, to choose again
	liars     []bool // RepelOptions.RegretLiars
}

// lease is the holders' attach TTL: none lapses, as every simulated client
// renews at every round or leaves (a switch, a refusal everywhere, a token
// of its own), and a holder that stops holding drops its clients.
const lease = time.Duration(math.MaxInt64)

func newAttacher(rtt latency.RTTs, coords []vivaldi.Coord, ids []string, capacity int, displace time.Duration, cfg repel.AttachConfig) (*attacher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	a := &attacher{
		rtt: rtt, coords: coords, ids: ids, index: make(map[string]int, len(ids)), capacity: capacity, displace: displace, cfg: cfg,
		att: make([]int, len(coords)), ch: make([]*repel.Chooser, len(coords)), served: map[int]*superpeer.AttachTable{},
	}
	for i := range a.att {
		a.att[i] = -1
	}
	for i, id := range ids {
		a.index[id] = i
	}
	return a, nil
}

// round is one renewal by every client in order: a peer that no longer
// holds a token drops its clients (superpeer.Attach.DropClients) and they
// choose anew, a holder leaves its own holder, then each client runs the
// selector's attach step.
func (a *attacher) round(holders []int, now time.Duration, order []int) {
	is := make(map[int]bool, len(holders))
	for _, h := range holders {
		is[h] = true
		if a.served[h] == nil {
			a.served[h] = superpeer.NewAttachTable(a.capacity, lease, a.displace)
		}
	}
	for h, t := range a.served {
		if !is[h] {
			a.stats.Capped += int(t.Capped)
			delete(a.served, h)
		}
	}
	if a.cfg.RegretFactor > 0 {
		// Each holder bounds the regrets it takes by the coordinates of
		// the client and of the live holders, as the live selector does.
		for _, h := range holders {
			var others []vivaldi.Coord
			for _, o := range holders {
				if o != h {
					others = append(others, a.coords[o])
				}
			}
			self := a.coords[h]
			a.served[h].Bound = func(c superpeer.ClientCoord) time.Duration {
				return a.cfg.RegretBound(vivaldi.Coord{Vec: c.Vec, Height: c.Height}, self, others)
			}
		}
	}
	for c, h := range a.att {
		switch {
		case h < 0:
		case !is[h]:
			a.att[c] = -1
		case is[c]:
			a.served[h].Leave(peer.ID(a.ids[c]))
			a.att[c] = -1
		}
	}
	a.stats.Unattached = 0
	at := epoch0.Add(now)
	for _, c := range order {
		if !is[c] {
			a.step(c, holders, at)
		}
		for len(a.displaced) > 0 {
			d := a.displaced[0]
			a.displaced = a.displaced[1:]
			a.step(d, holders, at)
		}
	}
}

// step is repel.Selector.attachStep for client c: measure what the
// chooser asks for (the true RTT), then ask the holders in its order.
func (a *attacher) step(c int, holders []int, now time.Time) {
	ch := a.ch[c]
	if ch == nil {
		ch, _ = repel.NewChooser(a.cfg) // cfg validated in newAttacher
		a.ch[c] = ch
	}
	cands := make([]repel.Candidate, 0, len(holders))
	for _, h := range holders {
		cands = append(cands, repel.Candidate{ID: a.ids[h], Predicted: a.coords[c].DistanceTo(a.coords[h])})
	}
	cur := ""
	if a.att[c] >= 0 {
		cur = a.ids[a.att[c]]
	}
	for id := ch.Next(now, cur, cands); id != ""; id = ch.Next(now, cur, cands) {
		a.stats.Probes++
		d := a.rtt.RTT(c, a.index[id])
		ch.Measured(now, id, time.Duration(d*float64(time.Millisecond)), d >= 0)
	}
	old := a.att[c]
	me := peer.ID(a.ids[c])
	coord := superpeer.ClientCoord{Vec: a.coords[c].Vec, Height: a.coords[c].Height}
	order := ch.Ranked(now, cur, cands)
	for k, ci := range order {
		h := a.index[ci.ID]
		a.stats.Requests++
		regret := repel.Regret(order, k)
		if a.liars != nil && a.liars[c] {
			regret = time.Duration(math.MaxInt64) // "no other choice"
		}
		st, victim := a.served[h].Admit(now, me, regret, coord)
		if st != superpeer.Accepted {
			a.stats.RefusedFull++
			continue
		}
		if victim != "" {
			m := a.index[string(victim)]
			a.att[m] = -1
			a.displaced = append(a.displaced, m)
			a.stats.Displaced++
			if a.liars != nil && a.liars[c] && !a.liars[m] {
				a.stats.DisplacedByLiars++
			}
		}
		if h != old && old >= 0 {
			a.served[old].Leave(me)
			a.stats.Switches++
		}
		a.att[c] = h
		if d := a.rtt.RTT(c, h); d >= 0 { // the exchange after attaching
			ch.Observed(now, ci.ID, time.Duration(d*float64(time.Millisecond)))
		}
		a.explore(c, ch, now, cands)
		return
	}
	if old >= 0 {
		a.served[old].Leave(me)
	}
	a.att[c] = -1
	a.stats.Unattached++
	a.explore(c, ch, now, cands)
}

// explore measures what client c's chooser explores after asking (the
// true RTT), as the live selector does.
func (a *attacher) explore(c int, ch *repel.Chooser, now time.Time, cands []repel.Candidate) {
	for id := ch.Explore(now, cands); id != ""; id = ch.Explore(now, cands) {
		a.stats.Explored++
		d := a.rtt.RTT(c, a.index[id])
		ch.Explored(now, id, time.Duration(d*float64(time.Millisecond)), d >= 0)
	}
}

// statsNow are the stats with the regrets capped by the holders still
// serving.
func (a *attacher) statsNow() AttachStats {
	st := a.stats
	for _, t := range a.served {
		st.Capped += int(t.Capped)
	}
	return st
}

// load is how many clients holder h serves.
func (a *attacher) load(h int) int {
	n := 0
	for _, x := range a.att {
		if x == h {
			n++
		}
	}
	return n
}

// assignment is the attachments as a metrics.Assignment: holders serve
// themselves, unattached clients are Unassigned.
func (a *attacher) assignment(holders []int) metrics.Assignment {
	out := make(metrics.Assignment, len(a.att))
	copy(out, a.att)
	for _, h := range holders {
		out[h] = h
	}
	return out
}
