package repel

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"github.com/superpeer-overlay/superpeer/vivaldi"
)

// Model chooses the potential a token descends.
type Model uint8

const (
	// Repulsion is Lo et al.'s rule (Lo et al. 2005): every other token j
	// pushes token i along unit(x_i − x_j) with magnitude 1/d^p, d the
	// predicted RTT between them; the potential is Σ_j φ(d_ij) with
	// φ(d) = d^(1−p)/(p−1), or −ln d for p = 1. Run to rest it drives the
	// tokens to the rim of the coordinate cloud, far from most clients.
	Repulsion Model = iota
	// Attract is our model, aimed at client latency. The potential of token
	// i at x is the mean, over the clients the node knows, of
	// min(d(c, x), d(c, nearest other token)) — the k-median cost of the
	// clients with token i at x — plus λ·Σ_j φ(d(x, x_j)), a short-range
	// repulsion that keeps two tokens from sharing one spot. Each term is a
	// sum over the whole system in which only token i's terms depend on x, so
	// a move that lowers the token's potential lowers the system's by the
	// same amount: the moves are a local search for the k-median and stop.
	// With Config.Capacity the client term is a capacitated assignment
	// (see clientCost), a heuristic that no longer splits exactly; neither
	// do the measured RTTs of the digests (Sample.RTT, which replace the
	// predicted distance of those clients to their own token); cooling
	// still bounds the moves.
	Attract
)

func (m Model) String() string {
	switch m {
	case Repulsion:
		return "repulsion"
	case Attract:
		return "attract"
	}
	return fmt.Sprintf("Model(%d)", uint8(m))
}

// field is the force field one token sees: the other tokens and, for
// Attract, the clients, with each client's distance to its nearest other
// token worked out once so that a candidate costs O(clients + tokens).
type field struct {
	model    Model
	power    float64
	lambda   float64
	minDist  float64
	capacity float64 // C in client weight; 0: unbounded
	others   []vivaldi.Coord
	clients  []vivaldi.Coord
	weights  []float64 // per client, nil for all 1
	wsum     float64   // Σ weights
	dOther   []float64 // per client: distance to the nearest other token (+Inf if none)
	// holder and measured are, per client (nil: none), the index in others
	// of the token it is attached to (-1: unknown) and its measured RTT to
	// that holder (0: unknown), which replaces the predicted distance.
	holder   []int
	measured []float64
	// base is, with a capacity, each client's cost without this token:
	// its mean distance in a capacitated assignment to the other tokens
	// (see capacitate); nil until computed.
	base []float64
}

func (f *field) weight(i int) float64 {
	if f.weights == nil {
		return 1
	}
	return f.weights[i]
}

// setWeights makes client i stand for w[i] clients (a digest point).
func (f *field) setWeights(w []float64) {
	f.weights, f.wsum = w, 0
	for _, x := range w {
		f.wsum += x
	}
	f.base = nil
}

func newField(cfg *Config, others, clients []vivaldi.Coord) *field {
	f := &field{
		model:    cfg.Model,
		power:    cfg.RepelPower,
		lambda:   cfg.Lambda,
		minDist:  cfg.MinDistance.Seconds(),
		capacity: float64(cfg.Capacity),
		others:   others,
	}
	if cfg.Model == Attract {
		f.clients = clients
		f.wsum = float64(len(clients))
		f.dOther = make([]float64, len(clients))
		for i, c := range clients {
			best := math.Inf(1)
			for _, o := range others {
				if d := c.DistanceTo(o); d < best {
					best = d
				}
			}
			f.dOther[i] = best
		}
	}
	return f
}

// setMeasured tells the field, per client, the other token it is attached
// to (index in others, -1 for none) and its measured RTT to that token's
// holder (0: not measured): that distance replaces the predicted one.
func (f *field) setMeasured(holder []int, rtt []float64) {
	f.holder, f.measured = holder, rtt
	for i, c := range f.clients {
		d, ok := f.measuredTo(i)
		if !ok {
			continue
		}
		for j, o := range f.others {
			if j != f.holder[i] {
				d = min(d, c.DistanceTo(o))
			}
		}
		f.dOther[i] = d
	}
	f.base = nil
}

func (f *field) measuredTo(i int) (float64, bool) {
	if f.holder == nil || f.holder[i] < 0 || !(f.measured[i] > 0) {
		return 0, false
	}
	return f.measured[i], true
}

// dist clamps a predicted distance from below: two tokens on one spot (or
// coordinates whose heights are all zero) would otherwise repel infinitely.
func (f *field) dist(a, b vivaldi.Coord) float64 {
	d := a.DistanceTo(b)
	if !(d >= f.minDist) { // also catches NaN from mismatched dimensions
		d = f.minDist
	}
	return d
}

// phi is the repulsion potential whose negative gradient is 1/d^p.
func (f *field) phi(d float64) float64 {
	if f.power == 1 {
		return -math.Log(d)
	}
	return math.Pow(d, 1-f.power) / (f.power - 1)
}

func (f *field) repulsion(x vivaldi.Coord) float64 {
	var u float64
	for _, o := range f.others {
		u += f.phi(f.dist(x, o))
	}
	return u
}

// potential of the token at x; lower is better.
func (f *field) potential(x vivaldi.Coord) float64 {
	if f.model == Repulsion {
		return f.repulsion(x)
	}
	cost, _ := f.clientCost(x)
	if f.wsum > 0 {
		cost /= f.wsum
	}
	return cost + f.lambda*f.repulsion(x)
}

// share is the part of the potential at x that the token answers for, the
// yardstick of MinGain. For Repulsion that is its whole potential. For
// Attract it is the RTT of the clients it serves (summed and divided by
// all clients as the potential is): measured against the system's whole
// cost, a token serving 1/S of the clients could only ever move for a gain
// S times larger than intended.
func (f *field) share(x vivaldi.Coord) float64 {
	if f.model == Repulsion {
		return f.potential(x)
	}
	_, served := f.clientCost(x)
	if f.wsum > 0 {
		served /= f.wsum
	}
	return served
}

// clientCost is Attract's client term at x, not yet divided by the total
// weight, and the part of it the token serves.
//
// Without a capacity it is Σ_c w_c·min(d(c, x), d(c, nearest other
// token)): the token serves the clients nearer to it than to any other.
//
// With a capacity C (and other tokens) a client's cost without this token
// is its place in a capacitated assignment to the other tokens (base), and
// the token serves the clients that save most by it, at most weight C (a
// client straddling the limit in part). A crowd larger than its nearest
// token can serve then pulls every token whose C clients gain by moving
// there, and a token is not drawn into a crowd it could not serve.
func (f *field) clientCost(x vivaldi.Coord) (cost, served float64) {
	if f.capacity <= 0 || len(f.others) == 0 {
		for i, c := range f.clients {
			w, d := f.weight(i), c.DistanceTo(x)
			if d < f.dOther[i] {
				cost += w * d
				served += w * d
			} else {
				cost += w * f.dOther[i]
			}
		}
		return cost, served
	}
	if f.base == nil {
		f.capacitate()
	}
	var near []saving
	for i, c := range f.clients {
		w, d := f.weight(i), c.DistanceTo(x)
		cost += w * f.base[i]
		if d < f.base[i] {
			near = append(near, saving{w, d, f.base[i] - d})
		}
	}
	fillByGain(near, f.capacity, func(s saving, in float64) {
		cost -= in * s.gain
		served += in * s.d
	})
	return cost, served
}

// saving is weight w of clients at distance d from a token that would
// save them gain each.
type saving struct{ w, d, gain float64 }

// fillByGain takes up to room of the savings' weight, the largest gain
// first (ties in order; an item straddling the limit in part), and calls
// take with each item and the weight taken from it. It sorts items unless
// room is unlimited (+Inf: all of every item, in order).
func fillByGain(items []saving, room float64, take func(s saving, in float64)) {
	if !math.IsInf(room, 1) {
		slices.SortStableFunc(items, func(a, b saving) int { return cmp.Compare(b.gain, a.gain) })
	}
	for _, s := range items {
		if room <= 0 {
			break
		}
		in := min(s.w, room)
		room -= in
		take(s, in)
	}
}

// nearestWith is the index of the smallest of ds among those ok accepts
// (ties to the lower index), or -1.
func nearestWith(ds []float64, ok func(o int) bool) int {
	j := -1
	for o, d := range ds {
		if ok(o) && (j < 0 || d < ds[j]) {
			j = o
		}
	}
	return j
}

// regret is the second-smallest of ds less the smallest (+Inf with fewer
// than two).
func regret(ds []float64) float64 {
	d1, d2 := math.Inf(1), math.Inf(1)
	for _, d := range ds {
		switch {
		case d < d1:
			d1, d2 = d, d1
		case d < d2:
			d2 = d
		}
	}
	return d2 - d1
}

// unservedCost is a client's cost in base when the other tokens are all
// full: more than any RTT (Vivaldi refuses RTTs over 10 s).
const unservedCost = 10.0

// capacitate computes base: the clients, in decreasing order of regret
// (the distance to their second-nearest other token minus that to their
// nearest; ties to the lower index), each take room at the other tokens
// nearest first, at most C weight per token; a client's base is the mean
// distance of its weight (unservedCost for weight no token has room for).
// This is metrics.AssignWithCapacity's regret heuristic over weights.
// O(clients·tokens) when clients fit in a token or two.
func (f *field) capacitate() {
	dist, order := f.byRegret()
	f.base = make([]float64, len(f.clients))
	load := make([]float64, len(f.others))
	for _, i := range order {
		ds := dist[i]
		w := f.weight(i)
		left, cost := w, 0.0
		// The nearest token with room (ties to the lower index) takes
		// what it can, then the next: a token taken from is full after
		// unless the client's weight ran out. Most clients fit in their
		// nearest, so picking beats sorting all k.
		for left > 0 {
			j := nearestWith(ds, func(o int) bool { return f.capacity-load[o] > 0 })
			if j < 0 {
				break
			}
			in := min(left, f.capacity-load[j])
			load[j] += in
			left -= in
			cost += in * ds[j]
		}
		cost += left * unservedCost
		if w > 0 {
			f.base[i] = cost / w
		}
	}
}

// byRegret is capacitate's start: each client's distance to every other
// token (its measured RTT to its own holder's), and the clients in
// decreasing order of regret, ties to the lower index.
func (f *field) byRegret() (dist [][]float64, order []int) {
	n, k := len(f.clients), len(f.others)
	dist = make([][]float64, n)
	regrets := make([]float64, n)
	order = make([]int, n)
	for i, c := range f.clients {
		order[i] = i
		ds := make([]float64, k)
		for j, o := range f.others {
			ds[j] = c.DistanceTo(o)
		}
		if d, ok := f.measuredTo(i); ok {
			ds[f.holder[i]] = d
		}
		dist[i] = ds
		regrets[i] = regret(ds)
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(regrets[b], regrets[a]) })
	return dist, order
}

// force is −∇potential in the Euclidean part of the space (heights cannot
// move: they are the access links of the peers). For Attract the client
// term pulls with unit strength toward each client nearer to the token than
// to any other (the gradient of a sum of distances; Capacity is not
// applied), divided by the number of clients as the potential is.
func (f *field) force(x vivaldi.Coord) []float64 {
	out := make([]float64, len(x.Vec))
	rep := 1.0
	if f.model == Attract {
		rep = f.lambda
		for i, c := range f.clients {
			if c.DistanceTo(x) < f.dOther[i] {
				addScaled(out, unitVec(c.Vec, x.Vec), f.weight(i)/f.wsum)
			}
		}
	}
	for _, o := range f.others {
		d := f.dist(x, o)
		addScaled(out, unitVec(x.Vec, o.Vec), rep*math.Pow(d, -f.power))
	}
	return out
}

// potential is the potential of a token at x given the other tokens'
// positions and, for Attract, the clients' coordinates. Simulators and tests
// use it; a Node computes the same number from its own view.
func potential(cfg Config, x vivaldi.Coord, others, clients []vivaldi.Coord) float64 {
	return newField(&cfg, others, clients).potential(x)
}

// force is the force on a token at x (a vector in the Euclidean part of the
// space); its norm is what Config.ForceThreshold is compared with.
func force(cfg Config, x vivaldi.Coord, others, clients []vivaldi.Coord) []float64 {
	return newField(&cfg, others, clients).force(x)
}

// systemPotential is the potential of a whole configuration: for Repulsion
// Σ_{i<j} φ(d_ij); for Attract the mean over clients of the distance to the
// nearest token plus λ·Σ_{i<j} φ(d_ij). A single token's move changes it by
// exactly the change of that token's Potential, which is why moves that
// lower the token's potential terminate. It ignores Config.Capacity.
func systemPotential(cfg Config, tokens, clients []vivaldi.Coord) float64 {
	f := newField(&cfg, nil, nil)
	var rep float64
	for i := range tokens {
		for j := i + 1; j < len(tokens); j++ {
			rep += f.phi(f.dist(tokens[i], tokens[j]))
		}
	}
	if cfg.Model == Repulsion {
		return rep
	}
	var cost float64
	for _, c := range clients {
		best := math.Inf(1)
		for _, t := range tokens {
			best = math.Min(best, c.DistanceTo(t))
		}
		cost += best
	}
	if len(clients) > 0 {
		cost /= float64(len(clients))
	}
	return cost + cfg.Lambda*rep
}

// unitVec is the unit vector from b to a. Two tokens on one point get a
// fixed direction, so that they still push apart instead of producing NaN.
func unitVec(a, b []float64) []float64 {
	u := make([]float64, len(a))
	var n float64
	for i := range a {
		u[i] = a[i] - b[i]
		n += u[i] * u[i]
	}
	n = math.Sqrt(n)
	if n < 1e-12 {
		for i := range u {
			u[i] = 0
		}
		if len(u) > 0 {
			u[0] = 1
		}
		return u
	}
	for i := range u {
		u[i] /= n
	}
	return u
}

func addScaled(dst, v []float64, s float64) {
	for i := range dst {
		dst[i] += s * v[i]
	}
}

func norm(v []float64) float64 {
	var s float64
	for _, x := range v {
		s += x * x
	}
	return math.Sqrt(s)
}
