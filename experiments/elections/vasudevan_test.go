package elections

import (
	"reflect"
	"testing"
)

// Every variant ends, at every seed, with each connected component led by
// its most capable node and every node of it naming that node.
func TestVasudevan(t *testing.T) {
	runAll(t, "vasudevan", []int{1, 2, 5, 16, 40}, 20, func(a Algorithm, n int, seed int64, r Result) {
		linked := false
		for _, c := range r.Configs {
			linked = linked || len(c.Neighbors) > 0
		}
		if linked && (r.ByKind["ELECTION"] == 0 || r.ByKind["HEARTBEAT"] == 0) {
			t.Fatalf("%s n=%d seed %d: messages %v", a.Key(), n, seed, r.ByKind)
		}
	})
}

// While the square is cut in two, each part is led by its own most capable
// node: the part that lost the leader elected a new one.
func TestVasudevanPartition(t *testing.T) {
	a := Lookup("vasudevan/partition")[0]
	split := 0
	for seed := int64(1); seed <= 20; seed++ {
		const n = 24
		sc := a.Scenario(n, seed)
		var cut []Fault
		for _, f := range sc.Faults {
			if f.Kind == LinkDown {
				cut = append(cut, f)
			}
		}
		if len(cut) == 0 || len(cut) == len(sc.Faults) {
			t.Fatalf("seed %d: %d of %d faults cut links", seed, len(cut), len(sc.Faults))
		}
		sc.Faults, sc.Limit = cut, vHealAt
		r, err := Run(sc, newVasudevan)
		if err != nil {
			t.Fatal(err)
		}
		if v := CheckComponents(r); !v.OneLeader || !v.RightLeader {
			t.Fatalf("seed %d, cut: %s", seed, v.Note)
		}
		leaders := map[int]bool{}
		for i, l := range r.Leaders {
			if r.Live[i] {
				leaders[l] = true
			}
		}
		if len(leaders) > 1 {
			split++
		}
	}
	if split < 15 {
		t.Fatalf("the cut left more than one leader in only %d of 20 runs", split)
	}
}

// The mobility model is a function of its seed and splits and merges
// components.
func TestWaypoint(t *testing.T) {
	const n = 32
	r := vRadius(n)
	changed := 0
	for seed := int64(1); seed <= 20; seed++ {
		fs := Waypoint(n, seed, r, 0.005, 0.02, 0, vMoveStart, vMoveEnd, vMoveStep)
		if !reflect.DeepEqual(fs, Waypoint(n, seed, r, 0.005, 0.02, 0, vMoveStart, vMoveEnd, vMoveStep)) {
			t.Fatal("waypoint faults differ for one seed")
		}
		up := unitDisc(Positions(n, seed), r)
		count := func() int {
			links := make([][]int, n)
			for i := range up {
				for j := range up[i] {
					if up[i][j] || up[j][i] {
						links[i] = append(links[i], j)
					}
				}
			}
			live := make([]bool, n)
			for i := range live {
				live[i] = true
			}
			return len(Components(links, live))
		}
		prev := count()
		for _, f := range fs {
			if f.Node >= f.Peer || up[f.Node][f.Peer] == (f.Kind == LinkUp) {
				t.Fatalf("seed %d: fault %+v does not change a link", seed, f)
			}
			up[f.Node][f.Peer] = f.Kind == LinkUp
			if c := count(); c != prev {
				changed++
				prev = c
			}
		}
	}
	if changed < 20 {
		t.Fatalf("components changed only %d times in 20 runs", changed)
	}
}

// CheckComponents fails a component whose nodes disagree or that follows
// a node other than its most capable.
func TestCheckComponents(t *testing.T) {
	r := Result{
		Links:   [][]int{{1}, {0}, {3}, {2}, nil},
		Live:    []bool{true, true, true, true, true},
		Configs: []Config{{ID: 1, Capacity: 0.5}, {ID: 2, Capacity: 0.5}, {ID: 3, Capacity: 0.9}, {ID: 4, Capacity: 0.1}, {ID: 5}},
	}
	for _, c := range []struct {
		leaders          []int
		oneLeader, right bool
	}{
		{[]int{1, 1, 2, 2, 4}, true, true},
		{[]int{0, 0, 2, 2, 4}, true, false},
		{[]int{1, 1, 2, 3, 4}, false, false},
		{[]int{1, 1, 2, 2, 2}, true, false},
	} {
		r.Leaders = c.leaders
		if v := CheckComponents(r); v.OneLeader != c.oneLeader || v.RightLeader != c.right {
			t.Errorf("leaders %v: %+v", c.leaders, v)
		}
	}
	// A crashed node is in no component.
	r.Live[4], r.Leaders = false, []int{1, 1, 2, 2, -1}
	if v := CheckComponents(r); !v.RightLeader {
		t.Errorf("crashed node counted: %s", v.Note)
	}
}
