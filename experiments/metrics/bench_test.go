package metrics

import (
	"fmt"
	"math/rand"
	"testing"

	"github.com/superpeer-overlay/superpeer/experiments/latency"
)

// BenchmarkGreedyKMedian times the baseline on the PlanetLab matrix (n = 490,
// filled) and on synthetic spaces of 2000 and 10 000 peers, the sizes the
// experiments use. The synthetic RTTs are computed per look-up, as in a run;
// a Matrix is a little faster per look-up.
func BenchmarkGreedyKMedian(b *testing.B) {
	pl, err := latency.Builtin("planetlab-490")
	if err != nil {
		b.Fatal(err)
	}
	spaces := []latency.RTTs{pl.Filled(), synth(2000, 1), synth(10000, 1)}
	for _, r := range spaces {
		for _, S := range []int{8, 32, 100} {
			b.Run(fmt.Sprintf("n=%d/S=%d", r.Len(), S), func(b *testing.B) {
				for b.Loop() {
					GreedyKMedian(r, S)
				}
			})
		}
	}
}

func BenchmarkGreedyKMedianSampled(b *testing.B) {
	r := synth(10000, 1)
	for _, S := range []int{8, 32, 100} {
		b.Run(fmt.Sprintf("n=10000/m=1000/S=%d", S), func(b *testing.B) {
			for b.Loop() {
				GreedyKMedianSampled(r, S, 1000, rand.New(rand.NewSource(1)))
			}
		})
	}
}

func BenchmarkAssignWithCapacity(b *testing.B) {
	r := synth(10000, 1)
	sp := GreedyKMedian(r, 100)
	for b.Loop() {
		AssignWithCapacity(r, sp, 100)
	}
}
