package swarm

import (
	"sort"

	"github.com/superpeer-overlay/superpeer/dht"
)

// NearestKeys returns, for every key, the index of the other key XOR-closest
// to it, in O(n log n): in sorted order the keys sharing the longest prefix
// with k form a run next to k on one side, and the XOR-closest is in that run.
// Equal keys are each other's nearest. With fewer than two keys every answer
// is -1.
func NearestKeys(keys []dht.Key) []int {
	n := len(keys)
	out := make([]int, n)
	for i := range out {
		out[i] = -1
	}
	if n < 2 {
		return out
	}
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return keys[order[a]].Less(keys[order[b]]) })
	for pos, i := range order {
		k := keys[i]
		best := -1
		var bestDist dht.Key
		for _, dir := range []int{-1, 1} {
			// Scan outwards while the shared prefix stays as long as the
			// neighbour's: beyond that every key is farther.
			if q := pos + dir; q >= 0 && q < n {
				l := k.CommonPrefixLen(keys[order[q]])
				for ; q >= 0 && q < n && k.CommonPrefixLen(keys[order[q]]) == l; q += dir {
					j := order[q]
					d := k.Xor(keys[j])
					if best < 0 || d.Less(bestDist) {
						best, bestDist = j, d
					}
				}
			}
		}
		out[i] = best
	}
	return out
}
