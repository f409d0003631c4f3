package metrics

import (
	"errors"
	"fmt"
	"math"

	"github.com/superpeer-overlay/superpeer/experiments/latency"
)

// Unassigned marks a peer with no superpeer in an Assignment.
const Unassigned = -1

// Assignment gives, for every peer, the index of the superpeer serving it. A
// superpeer's own entry is itself; a client without a superpeer is
// Unassigned.
type Assignment []int

// Loads counts the clients each superpeer serves (the superpeer itself not
// included), in the order of superpeers. Entries that name a peer that is not
// in superpeers are ignored.
func (a Assignment) Loads(superpeers []int) []int {
	slot := make(map[int]int, len(superpeers))
	for k, s := range superpeers {
		slot[s] = k
	}
	loads := make([]int, len(superpeers))
	for i, s := range a {
		if k, ok := slot[s]; ok && i != s {
			loads[k]++
		}
	}
	return loads
}

// Errors for inputs Evaluate refuses: they are mistakes in the caller's
// bookkeeping, and a number computed from them would mislead.
var (
	ErrLength             = errors.New("metrics: assignment length differs from the number of peers")
	ErrPeerRange          = errors.New("metrics: peer index out of range")
	ErrDuplicateSuperpeer = errors.New("metrics: superpeer listed twice")
	ErrSuperpeerNotSelf   = errors.New("metrics: a superpeer is assigned to another peer")
)

// Evaluation is Lo et al.'s four requirements measured on one selection and
// assignment. All RTTs are in milliseconds.
type Evaluation struct {
	// Count: how many superpeers there are against how many were wanted.
	Count CountStats `json:"count"`
	// ClientRTT summarises, over served clients whose link is known, the RTT
	// to the superpeer they are assigned to (proximity).
	ClientRTT Summary `json:"client_rtt"`
	// Spread says how well the superpeers cover the network (dispersion).
	Spread Spread `json:"spread"`
	// Load: clients per superpeer (capacity).
	Load LoadStats `json:"load"`
	// Clients is the number of peers that are not superpeers.
	Clients int `json:"clients"`
	// Unserved counts clients with no superpeer: Unassigned, or assigned to a
	// peer that is not a superpeer (a stale assignment, counted also in
	// Stale).
	Unserved int `json:"unserved"`
	// Stale counts clients assigned to a peer that is not a superpeer, as
	// happens in a live swarm after a superpeer steps down.
	Stale int `json:"stale"`
	// UnservedWithRoom counts unserved clients while some superpeer still had
	// room under the capacity: clients an assignment failed, not ones the
	// capacity could not hold. With unbounded capacity it equals Unserved
	// whenever there is at least one superpeer.
	UnservedWithRoom int `json:"unserved_with_room"`
	// UnknownRTT counts served clients whose RTT to their superpeer is
	// Missing; they are left out of ClientRTT.
	UnknownRTT int `json:"unknown_rtt"`
}

// CountStats compares the number of superpeers with its target.
type CountStats struct {
	Peers      int     `json:"peers"`
	Superpeers int     `json:"superpeers"`
	Share      float64 `json:"share"` // Superpeers / Peers
	// Target and Ratio (Superpeers / Target) are set by SetTarget; Ratio is
	// 1 when the count is right, and NaN while there is no target.
	Target int     `json:"target"`
	Ratio  float64 `json:"ratio"`
}

// Spread measures how superpeers are dispersed. Nearest* describe, over all
// clients, the RTT to the nearest superpeer whatever the assignment: its mean
// is the k-median cost per client (what a perfect assignment would achieve),
// and its coefficient of variation is near 0 when every client is about
// equally well covered and large when superpeers bunch in one region and
// leave another far away. Pair* describe RTTs between superpeers: a minimum
// near 0 means two superpeers sit on top of each other.
type Spread struct {
	NearestMean float64 `json:"nearest_mean"`
	NearestP50  float64 `json:"nearest_p50"`
	NearestP90  float64 `json:"nearest_p90"`
	NearestCV   float64 `json:"nearest_cv"`
	// Uncovered counts clients with no known RTT to any superpeer.
	Uncovered int     `json:"uncovered"`
	PairMin   float64 `json:"pair_min"`
	PairMean  float64 `json:"pair_mean"`
}

// LoadStats summarises clients per superpeer.
type LoadStats struct {
	Capacity    int     `json:"capacity"` // 0: unbounded
	Max         int     `json:"max"`
	Min         int     `json:"min"`
	Mean        float64 `json:"mean"`
	Gini        float64 `json:"gini"`
	MaxOverMean float64 `json:"max_over_mean"`
	// OverCapacity counts superpeers serving more than Capacity clients.
	OverCapacity int `json:"over_capacity"`
	// Spare is the room left: Σ max(0, Capacity − load); 0 when unbounded.
	Spare int `json:"spare"`
}

// SetTarget records the wanted number of superpeers and the ratio to it.
func (e *Evaluation) SetTarget(target int) {
	e.Count.Target = target
	if target > 0 {
		e.Count.Ratio = float64(e.Count.Superpeers) / float64(target)
	} else {
		e.Count.Ratio = math.NaN()
	}
}

// Evaluate measures a selection of superpeers and an assignment of peers to
// them against the true RTTs. capacity is the most clients a superpeer should
// serve, 0 for unbounded. It refuses (with an error wrapping one of the Err
// values) an assignment of the wrong length, indices out of range, a
// superpeer listed twice, and a superpeer assigned to anyone but itself.
// Cost: O(n·S) RTT look-ups plus O(S²) for the pairwise spread.
func Evaluate(rtts latency.RTTs, a Assignment, superpeers []int, capacity int) (Evaluation, error) {
	n := rtts.Len()
	if len(a) != n {
		return Evaluation{}, fmt.Errorf("%w: %d entries for %d peers", ErrLength, len(a), n)
	}
	isSP := make([]int, n) // slot+1 of a superpeer, 0 for a client
	for k, s := range superpeers {
		if s < 0 || s >= n {
			return Evaluation{}, fmt.Errorf("%w: superpeer %d of %d peers", ErrPeerRange, s, n)
		}
		if isSP[s] != 0 {
			return Evaluation{}, fmt.Errorf("%w: peer %d", ErrDuplicateSuperpeer, s)
		}
		isSP[s] = k + 1
	}
	for i, s := range a {
		if s != Unassigned && (s < 0 || s >= n) {
			return Evaluation{}, fmt.Errorf("%w: peer %d assigned to %d of %d peers", ErrPeerRange, i, s, n)
		}
		if isSP[i] != 0 && s != i {
			return Evaluation{}, fmt.Errorf("%w: superpeer %d assigned to %d", ErrSuperpeerNotSelf, i, s)
		}
	}

	var e Evaluation
	S := len(superpeers)
	e.Count = CountStats{Peers: n, Superpeers: S, Share: float64(S) / float64(n)}
	e.SetTarget(0)
	if n == 0 {
		e.Count.Share = math.NaN()
	}

	loads := make([]int, S)
	var clientRTT, nearest []float64
	for i, s := range a {
		if isSP[i] != 0 {
			continue
		}
		e.Clients++
		switch {
		case s == Unassigned:
			e.Unserved++
		case isSP[s] == 0:
			e.Unserved++
			e.Stale++
		default:
			loads[isSP[s]-1]++
			if d := rtts.RTT(i, s); d < 0 {
				e.UnknownRTT++
			} else {
				clientRTT = append(clientRTT, d)
			}
		}
		if _, d := nearestOf(rtts, i, superpeers); d < 0 {
			e.Spread.Uncovered++
		} else {
			nearest = append(nearest, d)
		}
	}
	e.ClientRTT = Summarize(clientRTT)

	ns := Summarize(nearest)
	e.Spread.NearestMean, e.Spread.NearestP50, e.Spread.NearestP90 = ns.Mean, ns.P50, ns.P90
	e.Spread.NearestCV = CV(nearest)
	var pairs []float64
	for x := 0; x < S; x++ {
		for y := x + 1; y < S; y++ {
			if d := rtts.RTT(superpeers[x], superpeers[y]); d >= 0 {
				pairs = append(pairs, d)
			}
		}
	}
	e.Spread.PairMin, e.Spread.PairMean = math.NaN(), Mean(pairs)
	if len(pairs) > 0 {
		e.Spread.PairMin = pairs[0]
		for _, d := range pairs {
			e.Spread.PairMin = math.Min(e.Spread.PairMin, d)
		}
	}

	e.Load = loadStats(loads, capacity)
	if e.Unserved > 0 && S > 0 && (capacity <= 0 || e.Load.Spare > 0) {
		e.UnservedWithRoom = e.Unserved
	}
	return e, nil
}

func loadStats(loads []int, capacity int) LoadStats {
	l := LoadStats{Capacity: max(capacity, 0), Mean: math.NaN(), MaxOverMean: math.NaN()}
	if len(loads) == 0 {
		return l
	}
	f := Floats(loads)
	l.Min, l.Max = loads[0], loads[0]
	for _, x := range loads {
		l.Min, l.Max = min(l.Min, x), max(l.Max, x)
		if capacity > 0 {
			if x > capacity {
				l.OverCapacity++
			} else {
				l.Spare += capacity - x
			}
		}
	}
	l.Mean = Mean(f)
	l.Gini = Gini(f)
	l.MaxOverMean = MaxOverMean(f)
	return l
}

// nearestOf returns the superpeer nearest to peer i and its RTT, ignoring
// Missing links and breaking ties by the order of superpeers; (Unassigned,
// -1) when no link is known.
func nearestOf(rtts latency.RTTs, i int, superpeers []int) (int, float64) {
	best, bestD := Unassigned, math.Inf(1)
	for _, s := range superpeers {
		if d := rtts.RTT(i, s); d >= 0 && d < bestD {
			best, bestD = s, d
		}
	}
	if best == Unassigned {
		return Unassigned, -1
	}
	return best, bestD
}
