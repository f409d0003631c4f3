package elections

import (
	"testing"
	"time"
)

// Bully elects the highest live ID at every seed and size, a crash of the
// would-be winner and a recovery included; its message counts are the
// textbook's exactly in the worst and best cases and within the worst case
// for a random initiator.
func TestBully(t *testing.T) {
	runAll(t, "bully", []int{1, 2, 3, 4, 5, 16, 33}, 30, func(a Algorithm, n int, seed int64, r Result) {
		if r.Agreed < 0 {
			t.Fatalf("%s n=%d seed %d: never agreed", a.Key(), n, seed)
		}
		got := a.Counted(r)
		switch a.Variant {
		case "worst":
			half := n * (n - 1) / 2
			if r.ByKind["ELECTION"] != half || r.ByKind["OK"] != half || r.ByKind["COORDINATOR"] != n-1 || float64(got) != a.Bound(n) {
				t.Fatalf("%s n=%d seed %d: %v, want %d ELECTION, %d OK, %d COORDINATOR", a.Key(), n, seed, r.ByKind, half, half, n-1)
			}
		case "best":
			if float64(got) != a.Bound(n) || r.ByKind["COORDINATOR"] != got {
				t.Fatalf("%s n=%d seed %d: %v, want %v COORDINATOR only", a.Key(), n, seed, r.ByKind, a.Bound(n))
			}
		case "":
			if float64(got) > a.Bound(n) {
				t.Fatalf("%s n=%d seed %d: %d messages over %v", a.Key(), n, seed, got, a.Bound(n))
			}
		}
	})
}

// The worst case stays exact at larger sizes.
func TestBullyWorstLarge(t *testing.T) {
	a := Lookup("bully/worst")[0]
	for _, n := range []int{64, 128} {
		r, _, err := a.Run(n, 7, false)
		if err != nil {
			t.Fatal(err)
		}
		if r.Messages != n*n-1 {
			t.Fatalf("n=%d: %d messages, want n²−1 = %d", n, r.Messages, n*n-1)
		}
	}
}

// In crash-mid the second-highest takes part in the election (it sends
// ELECTION and OK) and crashes before it announces; the third-highest is
// elected meanwhile, and the process that recovers takes over.
func TestBullyCrashMid(t *testing.T) {
	a := Lookup("bully/crash-mid")[0]
	for seed := int64(1); seed <= 30; seed++ {
		const n = 8
		sc := a.Scenario(n, seed)
		ids, top, second, _ := bullyRanks(n, seed)
		var crash, back time.Duration
		recovered := -1
		for _, f := range sc.Faults {
			switch {
			case f.Kind == Crash && f.Node == second:
				crash = f.At
			case f.Kind == Recover:
				back, recovered = f.At, f.Node
			}
		}
		r, v, err := a.Run(n, seed, true)
		if err != nil {
			t.Fatal(err)
		}
		if !v.RightLeader || r.Leaders[recovered] != recovered {
			t.Fatalf("seed %d: %s, leaders %v, recovered %d", seed, v.Note, r.Leaders, recovered)
		}
		third := -1
		for i, id := range ids {
			if id == n-2 {
				third = i
			}
		}
		answered, thirdWon := false, false
		for _, e := range r.Trace {
			if e.Deliver {
				continue
			}
			if e.From == second && e.At < back {
				if e.Kind == "COORDINATOR" {
					t.Fatalf("seed %d: the second-highest announced at %v before crashing at %v", seed, e.At, crash)
				}
				answered = answered || e.Kind == "OK"
			}
			if e.From == third && e.Kind == "COORDINATOR" && e.At > crash && e.At < back {
				thirdWon = true
			}
		}
		if !answered || !thirdWon || top < 0 {
			t.Fatalf("seed %d: second-highest answered %v, third-highest elected %v", seed, answered, thirdWon)
		}
	}
}
