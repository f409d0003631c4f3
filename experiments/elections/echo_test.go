package elections

import (
	"testing"
	"time"
)

// Echo with extinction elects the highest initiator at every seed with a
// spanning tree of parents; a single initiator's wave costs exactly 2m
// WAVE+ECHO messages, several initiators' waves at least that and at most
// 2m per initiator; the announcement down the tree costs n−1.
func TestEcho(t *testing.T) {
	runAll(t, "echo", []int{1, 2, 3, 4, 5, 16, 33, 100}, 30, func(a Algorithm, n int, seed int64, r Result) {
		m := echoEdges(r)
		if m > echoMaxEdges(n) {
			t.Fatalf("%s n=%d seed %d: %d edges, more than the bound's %d", a.Key(), n, seed, m, echoMaxEdges(n))
		}
		got := a.Counted(r)
		switch a.Variant {
		case "one":
			if got != 2*m {
				t.Fatalf("%s n=%d seed %d: %d WAVE+ECHO messages, want 2m = %d", a.Key(), n, seed, got, 2*m)
			}
		default:
			if got < 2*m || got > 2*m*n {
				t.Fatalf("%s n=%d seed %d: %d WAVE+ECHO messages outside [2m, 2m·n] = [%d, %d]", a.Key(), n, seed, got, 2*m, 2*m*n)
			}
		}
		if float64(got) > a.Bound(n) {
			t.Fatalf("%s n=%d seed %d: %d messages above the bound %v", a.Key(), n, seed, got, a.Bound(n))
		}
		if r.ByKind["LEADER"] != n-1 {
			t.Fatalf("%s n=%d seed %d: %d LEADER messages, want n−1", a.Key(), n, seed, r.ByKind["LEADER"])
		}
		if r.Agreed < 0 {
			t.Fatalf("%s n=%d seed %d: never agreed", a.Key(), n, seed)
		}
	})
}

// A late initiator with a higher ID, woken after the first wave is over,
// takes over with a wave of its own; one woken later still, already in a
// higher wave, stays out: two full waves exactly, each announced.
func TestEchoLateInitiator(t *testing.T) {
	const n = 20
	ids := make([]int, n)
	for i := range ids {
		ids[i] = i + 1
	}
	sc := Scenario{N: n, Seed: 7, Topology: Graph, Degree: echoDegree, Initiators: []int{0}, IDs: ids,
		Faults: []Fault{{At: 10 * time.Second, Kind: Wake, Node: n - 1}, {At: 20 * time.Second, Kind: Wake, Node: 1}}}
	r, err := Run(sc, newEcho)
	if err != nil {
		t.Fatal(err)
	}
	if l := r.LiveLeaders(); len(l) != 1 || l[0] != n-1 {
		t.Fatalf("leaders %v, want [%d]", l, n-1)
	}
	if err := echoTree(r, n-1); err != nil {
		t.Fatal(err)
	}
	m := echoEdges(r)
	if got := r.ByKind["WAVE"] + r.ByKind["ECHO"]; got != 4*m {
		t.Fatalf("%d WAVE+ECHO messages, want two waves, 4m = %d", got, 4*m)
	}
	if r.ByKind["LEADER"] != 2*(n-1) {
		t.Fatalf("%d LEADER messages, want 2(n−1)", r.ByKind["LEADER"])
	}
}

// The check rejects a broken tree: a cycle of parents, or a parent that is
// not a neighbour.
func TestEchoCheckTree(t *testing.T) {
	a := Lookup("echo/one")[0]
	r, v, err := a.Run(12, 3, false)
	if err != nil || !v.RightLeader {
		t.Fatalf("%v %s", err, v.Note)
	}
	root := r.Leaders[0]
	// A node that is its own parent: a cycle, and not a neighbour.
	i := (root + 1) % r.N
	e := r.Nodes[i].(*echo)
	old := e.parent
	e.parent = i
	if checkEcho(r).RightLeader {
		t.Fatal("a node that is its own parent passed")
	}
	e.parent = old
	if !checkEcho(r).RightLeader {
		t.Fatal("restored tree failed")
	}
	r.Nodes[root].(*echo).parent = i
	if checkEcho(r).RightLeader {
		t.Fatal("a root with a parent passed")
	}
	r.Nodes[root].(*echo).parent = -1
	// Two neighbours, neither the root, that are each other's parent.
	for i := range r.Nodes {
		for _, j := range r.Links[i] {
			if i != root && j != root {
				r.Nodes[i].(*echo).parent, r.Nodes[j].(*echo).parent = j, i
				if v := checkEcho(r); v.RightLeader {
					t.Fatal("a cycle of parents passed")
				} else {
					t.Log(v.Note)
				}
				return
			}
		}
	}
}
