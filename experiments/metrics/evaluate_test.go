package metrics

import (
	"errors"
	"math"
	"testing"
)

func TestEvaluate_HandCase(t *testing.T) {
	//          0  1  2  3   4   5   6
	pts := line{0, 1, 3, 20, 22, 26, 50}
	sp := []int{0, 3}
	// Peer 6 is unserved; peer 5 is assigned to 0 although 3 is nearer.
	a := Assignment{0, 0, 0, 3, 3, 0, Unassigned}
	e, err := Evaluate(pts, a, sp, 2)
	if err != nil {
		t.Fatal(err)
	}
	if e.Count.Peers != 7 || e.Count.Superpeers != 2 || !near(e.Count.Share, 2.0/7, 1e-12) || !math.IsNaN(e.Count.Ratio) {
		t.Errorf("Count = %+v", e.Count)
	}
	e.SetTarget(4)
	if e.Count.Ratio != 0.5 {
		t.Errorf("Ratio = %v, want 0.5", e.Count.Ratio)
	}
	if e.Clients != 5 || e.Unserved != 1 || e.Stale != 0 || e.UnknownRTT != 0 {
		t.Errorf("clients/unserved = %+v", e)
	}
	// Client RTTs: 1, 3, 2, 26.
	if e.ClientRTT.N != 4 || e.ClientRTT.Mean != 8 || e.ClientRTT.P50 != 2.5 || e.ClientRTT.Max != 26 {
		t.Errorf("ClientRTT = %+v", e.ClientRTT)
	}
	// Nearest-superpeer RTTs of clients 1, 2, 4, 5, 6: 1, 3, 2, 6, 30.
	if e.Spread.NearestMean != 8.4 || e.Spread.NearestP50 != 3 || e.Spread.Uncovered != 0 {
		t.Errorf("Spread = %+v", e.Spread)
	}
	if want := StdDev([]float64{1, 3, 2, 6, 30}) / 8.4; !near(e.Spread.NearestCV, want, 1e-12) {
		t.Errorf("NearestCV = %v, want %v", e.Spread.NearestCV, want)
	}
	if e.Spread.PairMin != 20 || e.Spread.PairMean != 20 {
		t.Errorf("pairwise = %v %v, want 20 20", e.Spread.PairMin, e.Spread.PairMean)
	}
	// Loads: superpeer 0 serves 3 (over C = 2), superpeer 3 serves 1.
	l := e.Load
	if l.Max != 3 || l.Min != 1 || l.Mean != 2 || l.Gini != 0.25 || l.MaxOverMean != 1.5 || l.OverCapacity != 1 || l.Spare != 1 {
		t.Errorf("Load = %+v", l)
	}
	if e.UnservedWithRoom != 1 {
		t.Errorf("UnservedWithRoom = %d, want 1 (superpeer 3 had room)", e.UnservedWithRoom)
	}
}

func TestEvaluate_StaleAndMissing(t *testing.T) {
	pts := line{0, 1, 2, 5}
	h := holes{pts, map[[2]int]bool{{2, 0}: true}}
	// Peer 1 is assigned to peer 3, which is no superpeer; peer 2's link to
	// its superpeer is unknown.
	e, err := Evaluate(h, Assignment{0, 3, 0, Unassigned}, []int{0}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if e.Stale != 1 || e.Unserved != 2 || e.UnknownRTT != 1 || e.ClientRTT.N != 0 || e.Spread.Uncovered != 1 {
		t.Errorf("got %+v", e)
	}
	if e.Load.Capacity != 0 || e.Load.Spare != 0 || e.UnservedWithRoom != 2 {
		t.Errorf("unbounded capacity: %+v", e.Load)
	}
	if !math.IsNaN(e.Spread.PairMin) {
		t.Errorf("PairMin with one superpeer = %v, want NaN", e.Spread.PairMin)
	}
}

func TestEvaluate_Refuses(t *testing.T) {
	pts := line{0, 1, 2}
	cases := []struct {
		name string
		a    Assignment
		sp   []int
		want error
	}{
		{"short", Assignment{0, 0}, []int{0}, ErrLength},
		{"superpeer out of range", Assignment{0, 0, 0}, []int{3}, ErrPeerRange},
		{"client out of range", Assignment{0, 7, 0}, []int{0}, ErrPeerRange},
		{"duplicate", Assignment{0, 0, 0}, []int{0, 0}, ErrDuplicateSuperpeer},
		{"superpeer not self", Assignment{0, 0, 0}, []int{0, 1}, ErrSuperpeerNotSelf},
	}
	for _, c := range cases {
		if _, err := Evaluate(pts, c.a, c.sp, 0); !errors.Is(err, c.want) {
			t.Errorf("%s: err = %v, want %v", c.name, err, c.want)
		}
	}
}
