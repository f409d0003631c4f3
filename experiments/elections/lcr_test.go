package elections

import "testing"

// LCR elects the highest ID at every seed, and its ELECTION count is the
// textbook's exactly in the worst and best ID orders and within the worst
// case for random IDs.
func TestLCR(t *testing.T) {
	for _, a := range Lookup("lcr") {
		for _, n := range []int{1, 2, 5, 16, 33} {
			for seed := int64(1); seed <= 20; seed++ {
				r, v, err := a.Run(n, seed, false)
				if err != nil {
					t.Fatal(err)
				}
				if !v.OneLeader || !v.RightLeader {
					t.Fatalf("%s n=%d seed %d: %s", a.Key(), n, seed, v.Note)
				}
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
			}
		}
	}
}
