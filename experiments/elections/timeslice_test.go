package elections

import (
	"testing"
	"time"
)

// TimeSlice elects the lowest ID at every seed with n TOKEN messages
// exactly; with m the lowest ID and R the round, the last node learns the
// leader in round n·m−1 and the run ends at n·m·R exactly, so time grows
// with m while messages stay n.
func TestTimeSlice(t *testing.T) {
	runAll(t, "timeslice", []int{1, 2, 3, 5, 16, 33}, 20, func(a Algorithm, n int, seed int64, r Result) {
		if r.Messages != n || a.Counted(r) != n || float64(n) != a.Bound(n) {
			t.Fatalf("%s n=%d seed %d: %d messages (%d TOKEN), want n", a.Key(), n, seed, r.Messages, a.Counted(r))
		}
		m := r.Configs[r.Leaders[0]].ID
		want := 1
		if a.Variant == "large-min" {
			want = n + 1
		}
		if m != want {
			t.Fatalf("%s n=%d seed %d: lowest ID %d, want %d", a.Key(), n, seed, m, want)
		}
		if n < 2 {
			return
		}
		R := timeSliceRound(r.Configs[0].MaxDelay)
		rounds := time.Duration(n * m)
		if r.End != rounds*R {
			t.Fatalf("%s n=%d seed %d: ended at %v, want n·min·R = %v", a.Key(), n, seed, r.End, rounds*R)
		}
		if r.Agreed < (rounds-2)*R || r.Agreed >= (rounds-1)*R {
			t.Fatalf("%s n=%d seed %d: agreed at %v, not in round n·min−1 [%v, %v)", a.Key(), n, seed, r.Agreed, (rounds-2)*R, (rounds-1)*R)
		}
	})
}

// Explicit IDs: the lowest one wins wherever it sits, and its phase is the
// only one in which a message is sent.
func TestTimeSliceIDs(t *testing.T) {
	sc := Scenario{N: 4, Seed: 1, Topology: Ring, IDs: []int{9, 3, 7, 5}, Trace: true}
	r, err := Run(sc, newTimeSlice)
	if err != nil {
		t.Fatal(err)
	}
	if v := CheckMinID(r); !v.RightLeader || r.Leaders[0] != 1 {
		t.Fatalf("leaders %v: %s", r.Leaders, v.Note)
	}
	R := timeSliceRound(r.Configs[0].MaxDelay)
	for _, e := range r.Trace {
		if !e.Deliver {
			round := int(e.At/R) + 1
			if round < 2*4+1 || round > 3*4 {
				t.Fatalf("a TOKEN sent at %v, round %d, outside phase 3 (rounds 9..12)", e.At, round)
			}
			if e.At%R != 0 {
				t.Fatalf("a TOKEN sent at %v, not at a round's start", e.At)
			}
		}
	}
}

// CheckMinID rejects a leader that is not the lowest ID.
func TestCheckMinID(t *testing.T) {
	r := Result{N: 3, Leaders: []int{2, 2, 2}, Live: []bool{true, true, true},
		Configs: []Config{{ID: 5}, {ID: 1}, {ID: 3}}}
	if v := CheckMinID(r); !v.OneLeader || v.RightLeader {
		t.Fatalf("%+v", v)
	}
	r.Leaders = []int{1, 1, 1}
	if v := CheckMinID(r); !v.RightLeader {
		t.Fatalf("%+v", v)
	}
	r.Live[1] = false
	r.Leaders = []int{2, -1, 2}
	if v := CheckMinID(r); !v.RightLeader {
		t.Fatalf("crashed lowest: %+v", v)
	}
}
