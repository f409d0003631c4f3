package sim

import (
	"github.com/superpeer-overlay/superpeer/dht"
	"github.com/superpeer-overlay/superpeer/experiments/metrics"
	"github.com/superpeer-overlay/superpeer/superpeer"
)

// PrefixResult is the outcome of the prefix method over a set of live peers.
type PrefixResult struct {
	// Leader is, per group, the index of its superpeer, or -1 for an empty
	// group.
	Leader []int
	// Superpeers lists the superpeers in ascending index order.
	Superpeers []int
	// Group is every peer's group.
	Group []int32
	// Assignment gives every peer's superpeer (capacity applied).
	Assignment metrics.Assignment
	// Overflow counts clients sent to another group's superpeer because
	// their own was full.
	Overflow int
}

// Prefix runs the prefix method on keys (all peers live): every peer p
// finds its group by scheme.Group and its superpeer by one lookup of
// scheme.SuperpeerKey(key(p)), whose answer in a converged DHT is the live
// peer XOR-closest to it; that peer is a superpeer, and p is one iff the
// answer is p. Clients attach to their group's superpeer; with capacity
// C > 0 a client finding it full tries the other groups' superpeers nearest
// first by group key (superpeer.Prefix.GroupsByDistance), as the live
// selector does. Clients are served in index order, so the result is a
// function of the keys alone. O(n) lookups plus the overflow.
func Prefix(keys []dht.Key, scheme superpeer.Prefix, capacity int) PrefixResult {
	G := scheme.Groups()
	r := PrefixResult{
		Leader:     make([]int, G),
		Group:      make([]int32, len(keys)),
		Assignment: make(metrics.Assignment, len(keys)),
	}
	for g := range r.Leader {
		r.Leader[g] = -1
	}
	// The lookup answer for sk: the XOR-closest peer. Every peer of group g
	// asks for the same sk = GroupKey(g); computing it once per group is
	// the same answer.
	for i, k := range keys {
		g := scheme.Group(k)
		r.Group[i] = int32(g)
		sk := scheme.SuperpeerKey(k)
		if l := r.Leader[g]; l < 0 || sk.Closer(k, keys[l]) {
			r.Leader[g] = i
		}
	}
	load := make([]int, G)
	isLeader := make([]bool, len(keys))
	for g, l := range r.Leader {
		if l >= 0 {
			r.Superpeers = append(r.Superpeers, l)
			isLeader[l] = true
			_ = g
		}
	}
	sortInts(r.Superpeers)
	var order [][]int // GroupsByDistance, cached per group
	for i := range keys {
		if isLeader[i] {
			r.Assignment[i] = i
			continue
		}
		g := int(r.Group[i])
		if capacity <= 0 || load[g] < capacity {
			load[g]++
			r.Assignment[i] = r.Leader[g]
			continue
		}
		if order == nil {
			order = make([][]int, G)
		}
		if order[g] == nil {
			order[g] = scheme.GroupsByDistance(g)
		}
		r.Assignment[i] = metrics.Unassigned
		for _, h := range order[g] {
			if r.Leader[h] >= 0 && load[h] < capacity {
				load[h]++
				r.Assignment[i] = r.Leader[h]
				r.Overflow++
				break
			}
		}
	}
	return r
}

// OccupiedGroups counts the groups at least one key falls in: the number of
// superpeers the prefix method elects among these peers.
func OccupiedGroups(keys []dht.Key, scheme superpeer.Prefix) int {
	seen := make([]bool, scheme.Groups())
	c := 0
	for _, k := range keys {
		if g := scheme.Group(k); !seen[g] {
			seen[g] = true
			c++
		}
	}
	return c
}
