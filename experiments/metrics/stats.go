package metrics

import (
	"math"
	"slices"
)

// Summary describes a sample. An empty sample has N = 0 and NaN everywhere
// else, so that a missing measurement can never pass for a zero latency.
type Summary struct {
	N      int     `json:"n"`
	Mean   float64 `json:"mean"`
	StdDev float64 `json:"stddev"` // population standard deviation
	Min    float64 `json:"min"`
	P50    float64 `json:"p50"`
	P90    float64 `json:"p90"`
	P99    float64 `json:"p99"`
	Max    float64 `json:"max"`
}

// Summarize computes a Summary of xs; xs is not modified.
func Summarize(xs []float64) Summary {
	if len(xs) == 0 {
		nan := math.NaN()
		return Summary{Mean: nan, StdDev: nan, Min: nan, P50: nan, P90: nan, P99: nan, Max: nan}
	}
	s := sortedCopy(xs)
	return Summary{
		N:      len(s),
		Mean:   Mean(s),
		StdDev: StdDev(s),
		Min:    s[0],
		P50:    QuantileSorted(s, 0.5),
		P90:    QuantileSorted(s, 0.9),
		P99:    QuantileSorted(s, 0.99),
		Max:    s[len(s)-1],
	}
}

// Mean is the arithmetic mean of xs, NaN for an empty sample.
func Mean(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	// Kahan summation: experiments average 10^5+ RTTs of very
	// different sizes, and the mean should not depend on their order much.
	var sum, c float64
	for _, x := range xs {
		y := x - c
		t := sum + y
		c = (t - sum) - y
		sum = t
	}
	return sum / float64(len(xs))
}

// StdDev is the population standard deviation of xs (divide by n, not n−1):
// the samples are whole populations (every client of a run), not draws.
func StdDev(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	m := Mean(xs)
	var ss float64
	for _, x := range xs {
		ss += (x - m) * (x - m)
	}
	return math.Sqrt(ss / float64(len(xs)))
}

// CV is the coefficient of variation, StdDev/Mean: a scale-free measure of
// how unevenly a quantity is spread. It is NaN for an empty sample and 0 for
// a sample of zeros.
func CV(xs []float64) float64 {
	m := Mean(xs)
	if m == 0 {
		return 0
	}
	return StdDev(xs) / m
}

// Quantile is the q-quantile (0 ≤ q ≤ 1) of xs, which need not be sorted.
//
// It interpolates linearly between order statistics: with x₀ ≤ … ≤ x_{n−1}
// and h = (n−1)·q, the quantile is x_⌊h⌋ + (h−⌊h⌋)·(x_⌊h⌋+1 − x_⌊h⌋). This
// is Hyndman and Fan's type 7, the default of R's quantile and NumPy's
// percentile, so our p50 and p90 can be checked against either. q = 0 is the
// minimum, q = 1 the maximum, and the median of an even sample is the mean of
// the middle two. An empty sample or q outside [0, 1] gives NaN.
func Quantile(xs []float64, q float64) float64 {
	return QuantileSorted(sortedCopy(xs), q)
}

// QuantileSorted is Quantile for a sample already sorted ascending, without
// the copy and sort.
func QuantileSorted(s []float64, q float64) float64 {
	if len(s) == 0 || !(q >= 0 && q <= 1) {
		return math.NaN()
	}
	h := float64(len(s)-1) * q
	lo := int(math.Floor(h))
	if lo >= len(s)-1 {
		return s[len(s)-1]
	}
	return s[lo] + (h-float64(lo))*(s[lo+1]-s[lo])
}

// Percentiles returns the quantiles of xs at each q in qs (0 ≤ q ≤ 1),
// sorting xs once.
func Percentiles(xs []float64, qs ...float64) []float64 {
	s := sortedCopy(xs)
	out := make([]float64, len(qs))
	for i, q := range qs {
		out[i] = QuantileSorted(s, q)
	}
	return out
}

// CDFPoint is one step of an empirical distribution function: a fraction P of
// the sample is ≤ X.
type CDFPoint struct {
	X float64 `json:"x"`
	P float64 `json:"p"`
}

// CDF is the empirical distribution function of xs: one point per distinct
// value, in ascending order, with P the fraction of the sample ≤ X. The last
// point has P = 1. NaNs are dropped. Plot it as a step function (the value
// holds from X to the next point's X).
func CDF(xs []float64) []CDFPoint {
	s := make([]float64, 0, len(xs))
	for _, x := range xs {
		if !math.IsNaN(x) {
			s = append(s, x)
		}
	}
	slices.Sort(s)
	n := float64(len(s))
	var out []CDFPoint
	for i := 0; i < len(s); i++ {
		if i+1 < len(s) && s[i+1] == s[i] {
			continue
		}
		out = append(out, CDFPoint{X: s[i], P: float64(i+1) / n})
	}
	return out
}

// Gini is the Gini coefficient of non-negative loads:
//
//	G = Σᵢ Σⱼ |xᵢ − xⱼ| / (2 n² μ)
//
// the mean absolute difference between two loads over twice the mean load. It
// is 0 when every superpeer carries the same load and (n−1)/n when one of n
// carries all of it (the definition without the n/(n−1) small-sample
// correction, so that it measures these n superpeers, not a population they
// are drawn from). All-zero or empty loads give 0: nothing is unequal.
// Computed in O(n log n) from the sorted loads as
// G = 2 Σᵢ i·x₍ᵢ₎ / (n Σ x) − (n+1)/n with i from 1.
func Gini(loads []float64) float64 {
	s := sortedCopy(loads)
	n := float64(len(s))
	var sum, weighted float64
	for i, x := range s {
		sum += x
		weighted += float64(i+1) * x
	}
	if sum == 0 {
		return 0
	}
	g := 2*weighted/(n*sum) - (n+1)/n
	return math.Max(0, g) // rounding can take equal loads a hair below 0
}

// MaxOverMean is the largest load over the mean load: how many times an
// average superpeer's work the busiest one does. It is 1 for equal loads,
// NaN for an empty slice and for all-zero loads.
func MaxOverMean(loads []float64) float64 {
	if len(loads) == 0 {
		return math.NaN()
	}
	m := Mean(loads)
	if m == 0 {
		return math.NaN()
	}
	return slices.Max(loads) / m
}

// Floats converts integer counts (such as clients per superpeer) for the
// float functions of this package.
func Floats[T ~int | ~int32 | ~int64 | ~uint32 | ~uint64](xs []T) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = float64(x)
	}
	return out
}

func sortedCopy(xs []float64) []float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s
}
