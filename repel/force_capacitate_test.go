package repel

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/superpeer-overlay/superpeer/vivaldi"
)

// capacitateSorted is capacitate's assignment as first written: each
// client's other tokens sorted by distance (stable: ties to the lower
// index), taken in that order while they have room. capacitate must give
// the same bases.
func capacitateSorted(f *field) []float64 {
	dist, order := f.byRegret()
	base := make([]float64, len(f.clients))
	k := len(f.others)
	load := make([]float64, k)
	byDist := make([]int, k)
	for _, i := range order {
		for j := range byDist {
			byDist[j] = j
		}
		ds := dist[i]
		slices.SortStableFunc(byDist, func(a, b int) int { return cmp.Compare(ds[a], ds[b]) })
		w := f.weight(i)
		left, cost := w, 0.0
		for _, j := range byDist {
			if left <= 0 {
				break
			}
			in := min(left, f.capacity-load[j])
			if in <= 0 {
				continue
			}
			load[j] += in
			left -= in
			cost += in * ds[j]
		}
		cost += left * unservedCost
		if w > 0 {
			base[i] = cost / w
		}
	}
	return base
}

// capacitate picks each client's nearest token with room instead of
// sorting them all; on random fields — coordinates on a coarse grid so
// that distances tie, digest weights, measured RTTs, capacities from one
// client to more than all of them — it gives exactly the bases of the
// sorted original.
func TestCapacitate_MatchesSortedAssignment(t *testing.T) {
	for seed := range uint64(400) {
		rng := rand.New(rand.NewPCG(seed, 11))
		coord := func() vivaldi.Coord {
			return vivaldi.Coord{Vec: []float64{float64(rng.IntN(6)) / 100, float64(rng.IntN(6)) / 100}, Height: float64(rng.IntN(3)) / 1000}
		}
		others := make([]vivaldi.Coord, 1+rng.IntN(12))
		for j := range others {
			others[j] = coord()
		}
		clients := make([]vivaldi.Coord, rng.IntN(60))
		for i := range clients {
			clients[i] = coord()
		}
		cfg := DefaultConfig()
		cfg.Model = Attract
		cfg.Capacity = []int{1, 2, 3, 5, 20, 1000}[rng.IntN(6)]
		f := newField(&cfg, others, clients)
		if rng.IntN(2) == 0 {
			w := make([]float64, len(clients))
			for i := range w {
				w[i] = []float64{0, 0.5, 1, 2.5, 7}[rng.IntN(5)]
			}
			f.setWeights(w)
		}
		if rng.IntN(2) == 0 {
			holder, rtt := make([]int, len(clients)), make([]float64, len(clients))
			for i := range holder {
				holder[i] = rng.IntN(len(others)+1) - 1
				if rng.IntN(2) == 0 {
					rtt[i] = float64(rng.IntN(50)) / 1000
				}
			}
			f.setMeasured(holder, rtt)
		}
		want := capacitateSorted(f)
		f.capacitate()
		if !slices.Equal(f.base, want) {
			t.Fatalf("seed %d (%d tokens, %d clients, capacity %v): bases %v, want %v", seed, len(others), len(clients), f.capacity, f.base, want)
		}
	}
}
