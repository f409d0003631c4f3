package elections

import "testing"

// LCR elects the highest ID at every seed, and its ELECTION count is the
// textbook's exactly in the worst and best ID orders and within the worst
// case for random IDs.
func TestLCR(t *testing.T) {
	runAll(t, "lcr", []int{1, 2, 5, 16, 33}, 20, func(a Algorithm, n int, seed int64, r Result) {
		got, bound := a.Counted(r), a.Bound(n)
		switch a.Variant {
		case "worst", "best":
			if float64(got) != bound {
				t.Fatalf("%s n=%d: %d ELECTION messages, want %v", a.Key(), n, got, bound)
			}
		default:
			if float64(got) > bound || got < 2*n-1 {
				t.Fatalf("%s n=%d seed %d: %d ELECTION messages outside [2n-1, %v]", a.Key(), n, seed, got, bound)
			}
		}
		if r.ByKind["ELECTED"] != n {
			t.Fatalf("%s n=%d: %d ELECTED messages, want n", a.Key(), n, r.ByKind["ELECTED"])
		}
		if r.Agreed < 0 {
			t.Fatalf("%s n=%d: never agreed", a.Key(), n)
		}
	})
}

// runAll runs the algorithms named name (every variant) at each size and
// seeds 1..seeds, fails on an error or a run without exactly one right
// leader, and hands every run to check.
func runAll(t *testing.T, name string, sizes []int, seeds int, check func(a Algorithm, n int, seed int64, r Result)) {
	t.Helper()
	algos := Lookup(name)
	if len(algos) == 0 {
		t.Fatalf("%s not registered", name)
	}
	for _, a := range algos {
		for _, n := range sizes {
			for seed := int64(1); seed <= int64(seeds); seed++ {
				r, v, err := a.Run(n, seed, false)
				if err != nil {
					t.Fatal(err)
				}
				if !v.OneLeader || !v.RightLeader {
					t.Fatalf("%s n=%d seed %d: %s", a.Key(), n, seed, v.Note)
				}
				check(a, n, seed, r)
			}
		}
	}
}
