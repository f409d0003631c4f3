package repel

import (
	"fmt"
	"math"

	"github.com/superpeer-overlay/superpeer/vivaldi"
)

// Model chooses the potential a token descends.
type Model uint8

const (
	// Repulsion is the seed's rule (Lo et al. 2005): every other token j
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
	model   Model
	power   float64
	lambda  float64
	minDist float64
	others  []vivaldi.Coord
	clients []vivaldi.Coord
	weights []float64 // per client, nil for all 1
	wsum    float64   // Σ weights
	dOther  []float64 // per client: distance to the nearest other token (+Inf if none)
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
}

func newField(cfg *Config, others, clients []vivaldi.Coord) *field {
	f := &field{
		model:   cfg.Model,
		power:   cfg.RepelPower,
		lambda:  cfg.Lambda,
		minDist: cfg.MinDistance.Seconds(),
		others:  others,
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
	var cost float64
	for i, c := range f.clients {
		cost += f.weight(i) * math.Min(c.DistanceTo(x), f.dOther[i])
	}
	if f.wsum > 0 {
		cost /= f.wsum
	}
	return cost + f.lambda*f.repulsion(x)
}

// share is the part of the potential at x that the token answers for, the
// yardstick of MinGain. For Repulsion that is its whole potential. For
// Attract it is the RTT of the clients it serves (those nearer to x than to
// any other token, summed and divided by all clients as the potential is):
// measured against the system's whole cost, a token serving 1/S of the
// clients could only ever move for a gain S times larger than intended.
func (f *field) share(x vivaldi.Coord) float64 {
	if f.model == Repulsion {
		return f.potential(x)
	}
	var cost float64
	for i, c := range f.clients {
		if d := c.DistanceTo(x); d < f.dOther[i] {
			cost += f.weight(i) * d
		}
	}
	if f.wsum > 0 {
		cost /= f.wsum
	}
	return cost
}

// force is −∇potential in the Euclidean part of the space (heights cannot
// move: they are the access links of the peers). For Attract the client
// term pulls with unit strength toward each client the token serves (the
// gradient of a sum of distances), divided by the number of clients as the
// potential is.
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

// Potential is the potential of a token at x given the other tokens'
// positions and, for Attract, the clients' coordinates. Simulators and tests
// use it; a Node computes the same number from its own view.
func Potential(cfg Config, x vivaldi.Coord, others, clients []vivaldi.Coord) float64 {
	return newField(&cfg, others, clients).potential(x)
}

// Force is the force on a token at x (a vector in the Euclidean part of the
// space); its norm is what Config.ForceThreshold is compared with.
func Force(cfg Config, x vivaldi.Coord, others, clients []vivaldi.Coord) []float64 {
	return newField(&cfg, others, clients).force(x)
}

// SystemPotential is the potential of a whole configuration: for Repulsion
// Σ_{i<j} φ(d_ij); for Attract the mean over clients of the distance to the
// nearest token plus λ·Σ_{i<j} φ(d_ij). A single token's move changes it by
// exactly the change of that token's Potential, which is why moves that
// lower the token's potential terminate.
func SystemPotential(cfg Config, tokens, clients []vivaldi.Coord) float64 {
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
