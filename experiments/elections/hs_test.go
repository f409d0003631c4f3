package elections

import "testing"

// Hirschberg–Sinclair elects the highest ID at every seed and size, powers
// of two and not, with its PROBE and REPLY messages within 8n(1+⌈log2 n⌉)
// and ELECTED going round once.
func TestHS(t *testing.T) {
	a := Lookup("hs")[0]
	for _, n := range []int{1, 2, 3, 4, 5, 7, 8, 16, 31, 33, 64, 100} {
		for seed := int64(1); seed <= 30; seed++ {
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
			if got := a.Counted(r); float64(got) > a.Bound(n) || got < 2*n {
				t.Fatalf("n=%d seed %d: %d PROBE+REPLY outside [2n, %v]", n, seed, got, a.Bound(n))
			}
			if r.ByKind["ELECTED"] != n {
				t.Fatalf("n=%d seed %d: %d ELECTED, want n", n, seed, r.ByKind["ELECTED"])
			}
		}
	}
}

// The bound's values at small n: ⌈log2 n⌉ is 0, 1, 2, 2, 3 at n = 1..5.
func TestHSBound(t *testing.T) {
	for n, want := range map[int]float64{1: 8, 2: 32, 3: 72, 4: 96, 5: 160, 1024: 8 * 1024 * 11} {
		if got := hsBound(n); got != want {
			t.Errorf("hsBound(%d) = %v, want %v", n, got, want)
		}
	}
}

// A node that does not initiate joins when the first probe reaches it, so
// the highest ID wins though it did not start.
func TestHSWakeUp(t *testing.T) {
	for _, n := range []int{2, 5, 16} {
		for seed := int64(1); seed <= 10; seed++ {
			sc := Scenario{N: n, Seed: seed, Topology: Ring, IDs: ringIDs(n, false), Initiators: []int{0}}
			r, err := Run(sc, newHS)
			if err != nil {
				t.Fatal(err)
			}
			if v := CheckMaxID(r); !v.RightLeader {
				t.Fatalf("n=%d seed %d: %s", n, seed, v.Note)
			}
		}
	}
}
