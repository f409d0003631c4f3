package metrics

import (
	"cmp"
	"container/heap"
	"math"
	"math/rand"
	"slices"

	"github.com/superpeer-overlay/superpeer/experiments/latency"
)

// RandomSuperpeers picks S distinct peers of n uniformly at random, returned
// in ascending order: the baseline any selection method must beat. S is
// clamped to [0, n]. It draws S numbers from rng (a partial Fisher–Yates
// shuffle), so the same seed gives the same choice.
func RandomSuperpeers(n, S int, rng *rand.Rand) []int {
	S = min(max(S, 0), n)
	perm := make([]int, n)
	for i := range perm {
		perm[i] = i
	}
	for i := 0; i < S; i++ {
		j := i + rng.Intn(n-i)
		perm[i], perm[j] = perm[j], perm[i]
	}
	out := perm[:S:S]
	slices.Sort(out)
	return out
}

// MissingPenalty is the cost, in ms, that the k-median baselines charge for a
// client whose link to every chosen superpeer is Missing. It is far above any
// Internet RTT, so covering a client always beats shaving a few milliseconds
// off another, yet finite, so that the greedy can start from "nothing
// covered" and compare candidates that miss a few links.
const MissingPenalty = 1e6

// GreedyKMedian chooses S superpeers with the centralised greedy for
// k-median over the true RTTs: starting from none, repeatedly add the peer
// that lowers the total RTT from every peer to its nearest chosen superpeer
// the most (ties to the lowest index). This is the near-optimal baseline: the
// greedy is within a small constant of the optimum on metric inputs and, on
// measured RTTs, usually within a few percent.
//
// The result is in the order chosen, so its first s entries are the greedy
// choice for s superpeers: one run at the largest S serves a sweep over S.
//
// It keeps, for every peer, the RTT to its nearest chosen superpeer, so the
// gain of a candidate is one O(n) pass and a round is at most O(n²): O(S·n²)
// in all. Because the gain of a candidate can only shrink as superpeers are
// added (the objective is submodular), gains are re-evaluated lazily (Minoux's
// accelerated greedy, "CELF"): a candidate is recomputed only when its stale
// gain tops the heap, which returns exactly the plain greedy's choice while
// recomputing a handful of candidates per round instead of n. The first round
// still costs n² RTT look-ups; for n much beyond 10 000 use
// GreedyKMedianSampled. A Missing link costs MissingPenalty.
func GreedyKMedian(rtts latency.RTTs, S int) []int {
	n := rtts.Len()
	cands := make([]int, n)
	for i := range cands {
		cands[i] = i
	}
	return greedyKMedian(rtts, S, cands)
}

// GreedyKMedianSampled is GreedyKMedian with superpeers drawn only from a
// uniform sample of m candidate peers (every peer still counts as a client).
// It cuts the first round from n² to m·n look-ups. A random sample of
// candidates already holds a peer close to every good facility, so little is
// lost: on a clustered synthetic space of 10 000 peers, m = 1000 gave a cost
// 0.5%, 2.6% and 5.2% above the full greedy for S = 8, 32 and 100, in an
// eighth to a tenth of the time (see BenchmarkGreedyKMedianSampled). Raise m
// with S. m ≥ n is the full greedy.
func GreedyKMedianSampled(rtts latency.RTTs, S, m int, rng *rand.Rand) []int {
	n := rtts.Len()
	if m >= n {
		return GreedyKMedian(rtts, S)
	}
	return greedyKMedian(rtts, S, RandomSuperpeers(n, m, rng))
}

func greedyKMedian(rtts latency.RTTs, S int, cands []int) []int {
	n := rtts.Len()
	S = min(max(S, 0), len(cands))
	best := make([]float64, n)
	for i := range best {
		best[i] = MissingPenalty
	}
	gain := func(c int) float64 {
		// Terms are added in a fixed order and each can only shrink as best
		// does, so even in floating point a recomputed gain never exceeds
		// the stale one: the lazy evaluation stays exact.
		var g float64
		for i := 0; i < n; i++ {
			d := rtts.RTT(c, i)
			if d < 0 {
				d = MissingPenalty
			}
			if d < best[i] {
				g += best[i] - d
			}
		}
		return g
	}
	h := make(gainHeap, len(cands))
	for k, c := range cands {
		h[k] = gainEntry{peer: c, gain: gain(c)}
	}
	heap.Init(&h)
	chosen := make([]int, 0, S)
	for len(chosen) < S {
		top := &h[0]
		if top.round != len(chosen) {
			top.gain, top.round = gain(top.peer), len(chosen)
			heap.Fix(&h, 0)
			continue
		}
		c := heap.Pop(&h).(gainEntry).peer
		chosen = append(chosen, c)
		for i := 0; i < n; i++ {
			if d := rtts.RTT(c, i); d >= 0 && d < best[i] {
				best[i] = d
			}
		}
	}
	return chosen
}

// gainEntry is a candidate with its gain as of round (number of superpeers
// chosen when it was computed).
type gainEntry struct {
	peer  int
	gain  float64
	round int
}

// gainHeap pops the largest gain first, the lowest peer index among equals:
// the plain greedy's tie-break, which keeps the lazy version identical to it.
type gainHeap []gainEntry

func (h gainHeap) Len() int { return len(h) }
func (h gainHeap) Less(a, b int) bool {
	if h[a].gain != h[b].gain {
		return h[a].gain > h[b].gain
	}
	return h[a].peer < h[b].peer
}
func (h gainHeap) Swap(a, b int) { h[a], h[b] = h[b], h[a] }
func (h *gainHeap) Push(x any)   { *h = append(*h, x.(gainEntry)) }
func (h *gainHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// KMedianCost is the k-median objective: the sum over all peers of the RTT
// to the nearest of superpeers (a superpeer's is 0). A peer with no known
// link to any superpeer costs MissingPenalty. No superpeers costs
// MissingPenalty per peer.
func KMedianCost(rtts latency.RTTs, superpeers []int) float64 {
	var cost float64
	for i := 0; i < rtts.Len(); i++ {
		_, d := nearestOf(rtts, i, superpeers)
		if d < 0 {
			d = MissingPenalty
		}
		cost += d
	}
	return cost
}

// AssignNearest assigns every client to its nearest superpeer (ties to the
// one listed first) and every superpeer to itself. A client with no known
// link to any superpeer is Unassigned. O(n·S).
func AssignNearest(rtts latency.RTTs, superpeers []int) Assignment {
	a := make(Assignment, rtts.Len())
	for i := range a {
		a[i], _ = nearestOf(rtts, i, superpeers)
	}
	for _, s := range superpeers {
		a[s] = s
	}
	return a
}

// AssignWithCapacity assigns clients to superpeers so that none serves more
// than C clients (C ≤ 0 is unbounded, which is AssignNearest).
//
// It is the regret heuristic of the generalised assignment problem, in its
// static form: clients are taken in decreasing order of regret, the RTT to
// their second-nearest superpeer minus that to their nearest (a client with a
// single reachable superpeer has infinite regret), ties to the lowest index,
// and each takes its nearest superpeer that still has room. Clients that would
// lose most by missing their first choice thus choose first. A client is left
// Unassigned only when every superpeer it has a known link to is full, so with
// a complete matrix no client is unserved while any capacity remains, and
// min(clients, S·C) clients are served. It is a heuristic, not the optimal
// min-cost assignment; it is O(n·S + n log n).
func AssignWithCapacity(rtts latency.RTTs, superpeers []int, C int) Assignment {
	if C <= 0 {
		return AssignNearest(rtts, superpeers)
	}
	n := rtts.Len()
	a := make(Assignment, n)
	for i := range a {
		a[i] = Unassigned
	}
	for _, s := range superpeers {
		a[s] = s
	}
	type client struct {
		peer   int
		regret float64
	}
	var order []client
	for i := 0; i < n; i++ {
		if a[i] != Unassigned {
			continue
		}
		d1, d2 := math.Inf(1), math.Inf(1)
		for _, s := range superpeers {
			switch d := rtts.RTT(i, s); {
			case d < 0:
			case d < d1:
				d1, d2 = d, d1
			case d < d2:
				d2 = d
			}
		}
		if !math.IsInf(d1, 1) {
			order = append(order, client{i, d2 - d1})
		}
	}
	slices.SortFunc(order, func(x, y client) int {
		if c := cmp.Compare(y.regret, x.regret); c != 0 {
			return c
		}
		return cmp.Compare(x.peer, y.peer)
	})
	load := make([]int, len(superpeers))
	for _, c := range order {
		bk, bd := -1, math.Inf(1)
		for k, s := range superpeers {
			if d := rtts.RTT(c.peer, s); load[k] < C && d >= 0 && d < bd {
				bk, bd = k, d
			}
		}
		if bk >= 0 {
			a[c.peer] = superpeers[bk]
			load[bk]++
		}
	}
	return a
}

// Swap is the best exchange of one superpeer for one other peer under the
// k-median objective (KMedianCost, no capacity): one step of the
// k-medoids' swap search (PAM) from a given set.
type Swap struct {
	// Before and After are the objective's mean over the peers, ms: of
	// the set given, and after the exchange.
	Before, After float64
	// Out is the superpeer the exchange drops, In the peer it takes
	// instead (both -1 when no exchange lowers the cost).
	Out, In int
}

// BestSwap finds the single exchange of a superpeer for a peer that most
// lowers KMedianCost, in O(S·n²). A set that no exchange improves is a
// local optimum of the swap search; where it is far above a greedy
// k-median's cost, the loss is in which regions have a superpeer, not in
// where within its region each sits.
func BestSwap(rtts latency.RTTs, superpeers []int) Swap {
	n := rtts.Len()
	cost := func(d float64) float64 {
		if d < 0 {
			return MissingPenalty
		}
		return d
	}
	// Each peer's nearest and second-nearest superpeer distances, so that
	// removing one is O(1) a peer.
	near := make([]int, n)
	d1 := make([]float64, n)
	d2 := make([]float64, n)
	isSP := make(map[int]bool, len(superpeers))
	for _, s := range superpeers {
		isSP[s] = true
	}
	var before float64
	for i := range n {
		near[i], d1[i], d2[i] = -1, MissingPenalty, MissingPenalty
		for k, s := range superpeers {
			switch d := cost(rtts.RTT(i, s)); {
			case d < d1[i]:
				near[i], d1[i], d2[i] = k, d, d1[i]
			case d < d2[i]:
				d2[i] = d
			}
		}
		before += d1[i]
	}
	best := Swap{Before: before / float64(max(n, 1)), After: before / float64(max(n, 1)), Out: -1, In: -1}
	if n == 0 || len(superpeers) == 0 {
		return best
	}
	base := make([]float64, n)
	bestSum := before
	for k, out := range superpeers {
		for i := range n {
			if near[i] == k {
				base[i] = d2[i]
			} else {
				base[i] = d1[i]
			}
		}
		for in := range n {
			if isSP[in] {
				continue
			}
			var sum float64
			for i := range n {
				sum += min(base[i], cost(rtts.RTT(i, in)))
				if sum >= bestSum {
					break
				}
			}
			if sum < bestSum {
				bestSum, best.Out, best.In = sum, out, in
			}
		}
	}
	best.After = bestSum / float64(n)
	return best
}
