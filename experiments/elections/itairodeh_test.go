package elections

import (
	"math"
	"testing"
)

// expectedPhases is the exact expected number of Itai–Rodeh phases on a
// ring of n with every node active and IDs drawn in 1..n: a phase with k
// active nodes leaves the j that drew the highest ID, and ends the
// election if j = 1.
func expectedPhases(n int) float64 {
	// pow[m] = Σ_{v=1..n} ((v−1)/n)^m, so that the chance that exactly j of
	// k draws are the highest is C(k, j)·n^−j·pow[k−j].
	pow := make([]float64, n+1)
	for v := 1; v <= n; v++ {
		x, p := float64(v-1)/float64(n), 1.0
		for m := range pow {
			pow[m] += p
			p *= x
		}
	}
	lg := func(x int) float64 { l, _ := math.Lgamma(float64(x + 1)); return l }
	tied := func(k, j int) float64 {
		return math.Exp(lg(k)-lg(j)-lg(k-j)-float64(j)*math.Log(float64(n))) * pow[k-j]
	}
	e := make([]float64, n+1)
	e[1] = 1
	for k := 2; k <= n; k++ {
		s := 1.0
		for j := 2; j < k; j++ {
			s += tied(k, j) * e[j]
		}
		e[k] = s / (1 - tied(k, k))
	}
	return e[n]
}

// The exact expectation is below e/(e−1) from n = 5 on (2 at n = 2).
func TestItaiRodehExpectedPhases(t *testing.T) {
	if e := expectedPhases(2); math.Abs(e-2) > 1e-9 {
		t.Fatalf("n=2: %v phases expected, want 2", e)
	}
	if e := expectedPhases(3); math.Abs(e-27.0/16) > 1e-9 {
		t.Fatalf("n=3: %v phases expected, want 27/16", e)
	}
	for _, n := range []int{5, 8, 16, 64, 512} {
		if e := expectedPhases(n); e > itaiRodehPhases || e < 1.4 {
			t.Fatalf("n=%d: %v phases expected, above e/(e−1) = %v", n, e, itaiRodehPhases)
		}
	}
}

// Itai–Rodeh ends with exactly one leader at every one of 200 seeds, all
// nodes naming it and knowing the phases; LEADER costs n; at least one
// ELECTION a node and at most n² a phase. The mean phases over the seeds
// stay within e/(e−1) and near the exact expectation, and ties (a second
// phase) do happen.
func TestItaiRodeh(t *testing.T) {
	a := Lookup("itai-rodeh")[0]
	for _, n := range []int{1, 2, 3, 5, 16, 64} {
		const seeds = 200
		phases, multi := 0, 0
		for seed := int64(1); seed <= seeds; seed++ {
			r, v, err := a.Run(n, seed, false)
			if err != nil {
				t.Fatal(err)
			}
			if !v.OneLeader || !v.RightLeader {
				t.Fatalf("n=%d seed %d: %s", n, seed, v.Note)
			}
			if r.Agreed < 0 {
				t.Fatalf("n=%d seed %d: never agreed", n, seed)
			}
			p := r.Nodes[r.Leaders[0]].(*itaiRodeh).Phases()
			phases += p
			if p > 1 {
				multi++
			}
			if r.ByKind["LEADER"] != n {
				t.Fatalf("n=%d seed %d: %d LEADER messages, want n", n, seed, r.ByKind["LEADER"])
			}
			if got := a.Counted(r); got < n || got > n*n*p {
				t.Fatalf("n=%d seed %d: %d ELECTION messages in %d phases, outside [n, n²·phases]", n, seed, got, p)
			}
		}
		mean, want := float64(phases)/seeds, expectedPhases(n)
		t.Logf("n=%d: mean phases %.3f (exact expectation %.3f), %d of %d runs tied", n, mean, want, multi, seeds)
		if math.Abs(mean-want) > 0.25 {
			t.Fatalf("n=%d: mean phases %.3f, exact expectation %.3f", n, mean, want)
		}
		if n >= 5 && mean > itaiRodehPhases+0.1 {
			t.Fatalf("n=%d: mean phases %.3f above e/(e−1)+0.1", n, mean)
		}
		if n > 1 && multi == 0 {
			t.Fatalf("n=%d: no run needed a second phase", n)
		}
	}
}

// The mean ELECTION count stays below the plotted bound n²·e/(e−1).
func TestItaiRodehBound(t *testing.T) {
	a := Lookup("itai-rodeh")[0]
	for _, n := range []int{8, 64} {
		sum := 0
		const seeds = 50
		for seed := int64(1); seed <= seeds; seed++ {
			r, _, err := a.Run(n, seed, false)
			if err != nil {
				t.Fatal(err)
			}
			sum += a.Counted(r)
		}
		mean := float64(sum) / seeds
		t.Logf("n=%d: mean ELECTION %.1f, n·ln n %.1f, bound %.1f", n, mean, float64(n)*math.Log(float64(n)), a.Bound(n))
		if mean > a.Bound(n) {
			t.Fatalf("n=%d: mean %v ELECTION messages above the bound %v", n, mean, a.Bound(n))
		}
	}
}

// The nodes are anonymous: other IDs change nothing in a run.
func TestItaiRodehAnonymous(t *testing.T) {
	const n = 16
	for seed := int64(1); seed <= 10; seed++ {
		sc := Scenario{N: n, Seed: seed, Topology: Ring}
		a, err := Run(sc, newItaiRodeh)
		if err != nil {
			t.Fatal(err)
		}
		sc.IDs = ringIDs(n, true)
		b, err := Run(sc, newItaiRodeh)
		if err != nil {
			t.Fatal(err)
		}
		if a.Leaders[0] != b.Leaders[0] || a.Messages != b.Messages || a.End != b.End {
			t.Fatalf("seed %d: leader %d/%d, messages %d/%d with other IDs", seed, a.Leaders[0], b.Leaders[0], a.Messages, b.Messages)
		}
	}
}
