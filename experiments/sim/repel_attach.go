package sim

import (
	"time"

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
	// Probes are RTT measurements of holders (one Vivaldi exchange each
	// in the live selector).
	Probes int `json:"probes"`
	// Switches count clients that left a live holder for another;
	// Unattached, clients that every holder refused (in the last round).
	Switches   int `json:"switches"`
	Displaced  int `json:"displaced"`
	Unattached int `json:"unattached"`
}

// attacher is the clients' side of the attach protocol under
// AttachSelector — each client's repel.Chooser, the live selector's — and
// the holders' (their load against capacity).
type attacher struct {
	rtt      latency.RTTs
	coords   []vivaldi.Coord
	ids      []string
	index    map[string]int
	capacity int           // 0: unbounded
	displace time.Duration // superpeer.AttachOptions.Displace
	cfg      repel.AttachConfig

	att   []int // each peer's holder, -1 for none
	ch    []*repel.Chooser
	load  map[int]int
	stats AttachStats

	regret    []time.Duration // each attached client's, as it last said
	displaced []int           // clients displaced in this round, to choose again
}

func newAttacher(rtt latency.RTTs, coords []vivaldi.Coord, ids []string, capacity int, displace time.Duration, cfg repel.AttachConfig) (*attacher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	a := &attacher{
		rtt: rtt, coords: coords, ids: ids, index: make(map[string]int, len(ids)), capacity: capacity, displace: displace, cfg: cfg,
		att: make([]int, len(coords)), regret: make([]time.Duration, len(coords)), ch: make([]*repel.Chooser, len(coords)), load: map[int]int{},
	}
	for i := range a.att {
		a.att[i] = -1
	}
	for i, id := range ids {
		a.index[id] = i
	}
	return a, nil
}

// round is one renewal by every client in order: attachments to peers that
// no longer hold a token lapse (their clients choose anew), holders hold no
// attachment, then each client runs the selector's attach step.
func (a *attacher) round(holders []int, now time.Duration, order []int) {
	is := make(map[int]bool, len(holders))
	for _, h := range holders {
		is[h] = true
	}
	clear(a.load)
	for c, h := range a.att {
		switch {
		case h < 0:
		case is[c] || !is[h]:
			a.att[c] = -1
		default:
			a.load[h]++
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
	order := ch.Ranked(now, cur, cands)
	for k, ci := range order {
		h := a.index[ci.ID]
		a.stats.Requests++
		regret := repel.Regret(order, k)
		if h != old && a.capacity > 0 && a.load[h] >= a.capacity {
			m := a.displaceable(h, regret)
			if m < 0 {
				a.stats.RefusedFull++
				continue
			}
			a.att[m] = -1
			a.load[h]--
			a.displaced = append(a.displaced, m)
			a.stats.Displaced++
		}
		if h != old {
			if old >= 0 {
				a.load[old]--
				a.stats.Switches++
			}
			a.load[h]++
		}
		a.att[c] = h
		a.regret[c] = regret
		if d := a.rtt.RTT(c, h); d >= 0 { // the exchange after attaching
			ch.Observed(now, ci.ID, time.Duration(d*float64(time.Millisecond)))
		}
		return
	}
	if old >= 0 {
		a.load[old]--
	}
	a.att[c] = -1
	a.stats.Unattached++
}

// displaceable is the client of full holder h that a newcomer saying
// regret takes the place of, as superpeer.Attach chooses it (the least
// regret, then the least ID; superpeer.Displaces), or -1.
func (a *attacher) displaceable(h int, regret time.Duration) int {
	if a.displace <= 0 || regret <= 0 {
		return -1
	}
	m := -1
	for x, hx := range a.att {
		if hx == h && (m < 0 || a.regret[x] < a.regret[m] || (a.regret[x] == a.regret[m] && a.ids[x] < a.ids[m])) {
			m = x
		}
	}
	if m < 0 || !superpeer.Displaces(a.displace, regret, a.regret[m]) {
		return -1
	}
	return m
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
