package metrics

import (
	"math"
	"math/rand"
	"testing"
)

func TestExpectedPrefixCount_ExactSmallCases(t *testing.T) {
	cases := []struct {
		n, k int
		want float64
	}{
		{0, 5, 0},
		{1, 0, 1},
		{10, 0, 1},
		{1, 7, 1},
		{2, 1, 1.5},      // 2·(1 − 1/4)
		{3, 1, 1.75},     // 2·(1 − 1/8)
		{2, 2, 1.75},     // 4·(1 − 9/16)
		{100, 300, 100},  // 2^k far above n: every peer its own prefix
		{100, 2000, 100}, // beyond float range of 2^k
	}
	for _, c := range cases {
		if got := ExpectedPrefixCount(c.n, c.k); !near(got, c.want, 1e-12*math.Max(1, c.want)) {
			t.Errorf("ExpectedPrefixCount(%d, %d) = %v, want %v", c.n, c.k, got, c.want)
		}
	}
	if got := ExpectedPrefixCount(-1, 3); !math.IsNaN(got) {
		t.Errorf("negative n gave %v, want NaN", got)
	}
}

// TestExpectedPrefixCount_BruteForce enumerates every way n peers can fall
// into the 2^k prefixes and averages the number of occupied prefixes.
func TestExpectedPrefixCount_BruteForce(t *testing.T) {
	for k := 0; k <= 3; k++ {
		P := 1 << k
		for n := 1; n <= 5; n++ {
			total, ways := 0, 0
			pick := make([]int, n)
			for {
				seen := map[int]bool{}
				for _, p := range pick {
					seen[p] = true
				}
				total += len(seen)
				ways++
				i := 0
				for i < n && pick[i] == P-1 {
					pick[i] = 0
					i++
				}
				if i == n {
					break
				}
				pick[i]++
			}
			want := float64(total) / float64(ways)
			if got := ExpectedPrefixCount(n, k); !near(got, want, 1e-12) {
				t.Errorf("ExpectedPrefixCount(%d, %d) = %v, enumeration gives %v", n, k, got, want)
			}
		}
	}
}

func TestExpectedPrefixCount_MonteCarlo(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	const n, k, trials = 1000, 10, 200
	sum := 0
	for t := 0; t < trials; t++ {
		seen := make(map[uint64]bool)
		for i := 0; i < n; i++ {
			seen[rng.Uint64()>>(64-k)] = true
		}
		sum += len(seen)
	}
	mc := float64(sum) / trials
	got := ExpectedPrefixCount(n, k)
	// The count's standard deviation is about 13 here; the mean of 200
	// trials is within 1 with overwhelming probability.
	if !near(got, mc, 1) {
		t.Errorf("ExpectedPrefixCount(%d, %d) = %v, Monte Carlo gives %v", n, k, got, mc)
	}
}

// TestExpectedPrefixCount_Stable checks large n and k where the naive
// formula fails, against the first terms of its series: for n·2^−k ≪ 1,
// E ≈ n − n(n−1)/2 · 2^−k.
func TestExpectedPrefixCount_Stable(t *testing.T) {
	n, k := 1000000, 60
	p := math.Ldexp(1, -k)
	want := float64(n) - float64(n)*float64(n-1)/2*p
	if got := ExpectedPrefixCount(n, k); !near(got, want, 1e-9) {
		t.Errorf("ExpectedPrefixCount(%d, %d) = %.12f, want %.12f", n, k, got, want)
	}
	// Why the care: written naively, 1 − 2^−60 rounds to 1 and the count to 0.
	if naive := math.Ldexp(1-math.Pow(1-p, float64(n)), k); naive != 0 {
		t.Logf("naive formula gave %v (expected it to collapse to 0)", naive)
	}
	// Saturation: far more peers than prefixes fill every prefix.
	if got := ExpectedPrefixCount(100000000, 8); !near(got, 256, 1e-9) {
		t.Errorf("ExpectedPrefixCount(1e8, 8) = %v, want 256", got)
	}
}

func TestBookPrefixCount(t *testing.T) {
	full := math.Ldexp(1, 256) // every 256-bit ID taken
	for _, k := range []int{0, 3, 8, 20} {
		if got := BookPrefixCount(full, k, 256); got != math.Ldexp(1, k) {
			t.Errorf("BookPrefixCount(2^256, %d, 256) = %v, want 2^%d", k, got, k)
		}
	}
	if got := BookPrefixCount(1000, 8, 8); got != 1000 {
		t.Errorf("k = m: every node a superpeer, got %v", got)
	}
	if got := BookPrefixCount(1e6, 10, 256); got > 1e-60 {
		t.Errorf("BookPrefixCount(1e6, 10, 256) = %v, want vanishingly small", got)
	}
}
