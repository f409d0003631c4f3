package swarm

import (
	"math/rand"
	"testing"

	"github.com/superpeer-overlay/superpeer/dht"
)

func naiveNearest(keys []dht.Key) []int {
	out := make([]int, len(keys))
	for i := range keys {
		out[i] = -1
		for j := range keys {
			if j != i && (out[i] < 0 || keys[i].Closer(keys[j], keys[out[i]])) {
				out[i] = j
			}
		}
	}
	return out
}

func TestNearestKeys_MatchesNaive(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	for trial := 0; trial < 200; trial++ {
		n := 2 + rng.Intn(60)
		keys := make([]dht.Key, n)
		for i := range keys {
			rng.Read(keys[i][:])
			// Crowd the keys into few prefixes so runs are long.
			keys[i][0] &= byte(rng.Intn(4))
			keys[i][1] &= 0x0f
		}
		got, want := NearestKeys(keys), naiveNearest(keys)
		for i := range keys {
			if keys[i].Xor(keys[got[i]]) != keys[i].Xor(keys[want[i]]) {
				t.Fatalf("trial %d key %d: nearest %d, want %d", trial, i, got[i], want[i])
			}
		}
	}
}
