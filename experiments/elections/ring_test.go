package elections

import "testing"

// The ring election names the highest live ID at every seed and size; with
// all up each initiator's ELECTION and COORDINATOR go round once, 2n
// messages exactly, each hop acknowledged; a crashed process costs one
// ELECTION that gets no ACK and is left out of the COORDINATOR's round.
func TestRing(t *testing.T) {
	runAll(t, "ring", []int{1, 2, 3, 4, 5, 16, 33, 100}, 30, func(a Algorithm, n int, seed int64, r Result) {
		if r.Agreed < 0 {
			t.Fatalf("%s n=%d seed %d: never agreed", a.Key(), n, seed)
		}
		crashed := 0
		for _, up := range r.Live {
			if !up {
				crashed++
			}
		}
		live := n - crashed
		inits := 1
		if a.Variant == "concurrent" {
			inits = min(3, n)
		}
		want := map[string]int{
			"ELECTION":    inits * (live + crashed),
			"COORDINATOR": inits * live,
			"ACK":         inits * 2 * live,
		}
		for k, w := range want {
			if r.ByKind[k] != w {
				t.Fatalf("%s n=%d seed %d (%d crashed): %v, want %v", a.Key(), n, seed, crashed, r.ByKind, want)
			}
		}
		if got := a.Counted(r); float64(got) > a.Bound(n) || (crashed == 0 && float64(got) != a.Bound(n)) {
			t.Fatalf("%s n=%d seed %d: %d counted, bound %v", a.Key(), n, seed, got, a.Bound(n))
		}
	})
}
