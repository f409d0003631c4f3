package elections

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// echo is the echo algorithm with extinction (Tel), an election on an
// arbitrary connected graph. Every initiator starts a wave tagged with its
// ID: it sends WAVE to all its neighbours. A node joins the wave of the
// highest ID it has seen, dropping what it knew of lower ones (extinction:
// their messages are ignored from then on), takes the sender as its parent
// and sends WAVE to all its other neighbours; once every neighbour has
// answered in that wave (a WAVE or an ECHO), it sends ECHO to its parent. A
// non-initiator is woken by the first message it gets and simply joins.
// The initiator whose own wave completes is the leader, and its wave's
// parents are a spanning tree rooted at it; the leader then sends LEADER
// down that tree (n−1 messages).
//
// A full wave carries exactly two messages on every edge (a WAVE and an
// ECHO on a tree edge, a WAVE each way on any other), 2m on m edges, and
// every wave, extinguished or not, carries at most that.
type echo struct {
	cfg Config
	// wave is the ID of the wave the node is in (0: none yet); parent the
	// neighbour it joined that wave from (−1 for the wave's initiator or
	// a node not yet reached); rec how many neighbours have answered in
	// it; children the neighbours that echoed to it.
	wave, parent, rec int
	children          []int
	leader            int
	started           bool
}

type echoWave struct{ ID int }
type echoEcho struct{ ID int }
type echoLeader struct{ Leader, ID int }

func (echoWave) Kind() string       { return "WAVE" }
func (echoEcho) Kind() string       { return "ECHO" }
func (echoLeader) Kind() string     { return "LEADER" }
func (m echoWave) String() string   { return fmt.Sprintf("wave %d", m.ID) }
func (m echoEcho) String() string   { return fmt.Sprintf("wave %d", m.ID) }
func (m echoLeader) String() string { return fmt.Sprintf("leader id %d", m.ID) }

func newEcho(c Config) Node { return &echo{cfg: c, parent: -1, leader: -1} }

// Parent is the node's parent in the spanning tree of the wave it is in
// (−1 for the root, or a node no wave reached); at the end of a run, the
// leader's tree.
func (n *echo) Parent() int { return n.parent }

// Wave is the ID of the wave the node is in (0: none reached it).
func (n *echo) Wave() int { return n.wave }

// Start starts the node's own wave if it is an initiator, or is woken
// again later (a late initiator), and has not already joined a higher wave
// (which would extinguish its own).
func (n *echo) Start(_ time.Duration, o *Out) {
	woken := n.started
	n.started = true
	if !(n.cfg.Initiator || woken) || n.wave >= n.cfg.ID {
		return
	}
	n.join(n.cfg.ID, -1, o)
	n.answered(o)
}

// join enters wave id from parent (−1: the node's own wave) and sends the
// wave on to every other neighbour.
func (n *echo) join(id, parent int, o *Out) {
	n.wave, n.parent, n.rec, n.children = id, parent, 0, nil
	for _, q := range n.cfg.Neighbors {
		if q != parent {
			o.Send(q, echoWave{ID: id})
		}
	}
}

// answered echoes to the parent, or elects the node, once every neighbour
// has answered in the current wave.
func (n *echo) answered(o *Out) {
	if n.rec < len(n.cfg.Neighbors) {
		return
	}
	if n.parent >= 0 {
		o.Send(n.parent, echoEcho{ID: n.wave})
		return
	}
	n.leader = n.cfg.Index
	for _, c := range n.children {
		o.Send(c, echoLeader{Leader: n.cfg.Index, ID: n.cfg.ID})
	}
}

func (n *echo) Receive(_ time.Duration, from int, m Message, o *Out) {
	var id int
	switch m := m.(type) {
	case echoWave:
		id = m.ID
	case echoEcho:
		id = m.ID
	case echoLeader:
		n.leader = m.Leader
		for _, c := range n.children {
			o.Send(c, m)
		}
		return
	default:
		return
	}
	if id < n.wave {
		return // extinction: a lower wave dies here
	}
	if id > n.wave {
		n.join(id, from, o)
	}
	n.rec++
	if _, ok := m.(echoEcho); ok {
		n.children = append(n.children, from)
	}
	n.answered(o)
}

func (n *echo) Timeout(time.Duration, int, *Out) {}
func (n *echo) Leader() int                      { return n.leader }

// echoDegree is the mean degree of the echo's random graphs; such a graph
// of n nodes has at most n·echoDegree/2 edges.
const echoDegree = 4

// echoMaxEdges is the most edges a Graph scenario of n nodes at
// echoDegree can have (a ring plus n(d−2)/2 chords, some of them repeats).
func echoMaxEdges(n int) int { return n * echoDegree / 2 }

// echoEdges is the number of edges m of a run's graph.
func echoEdges(r Result) int {
	m := 0
	for _, l := range r.Links {
		m += len(l)
	}
	return m / 2
}

// checkEcho wants one leader, the live initiator with the highest ID,
// named by every live node, and the nodes' parents forming a spanning tree
// of the graph rooted at it.
func checkEcho(r Result) Verdict {
	ls := r.LiveLeaders()
	if len(ls) != 1 || ls[0] < 0 {
		return Verdict{Note: fmt.Sprintf("live nodes name %v", ls)}
	}
	want := -1
	for i, c := range r.Configs {
		if r.Live[i] && c.Initiator && (want < 0 || c.ID > r.Configs[want].ID) {
			want = i
		}
	}
	if ls[0] != want {
		return Verdict{OneLeader: true, Note: fmt.Sprintf("leader %d, highest initiator is %d", ls[0], want)}
	}
	if err := echoTree(r, want); err != nil {
		return Verdict{OneLeader: true, Note: err.Error()}
	}
	return Verdict{OneLeader: true, RightLeader: true}
}

// echoTree checks that the final parents form a spanning tree of r's graph
// rooted at root: the root has none, every other node's parent is a
// neighbour in the root's wave, and following parents from any node
// reaches the root.
func echoTree(r Result, root int) error {
	parent := make([]int, r.N)
	for i, nd := range r.Nodes {
		e, ok := nd.(*echo)
		if !ok {
			return fmt.Errorf("node %d is not an echo node", i)
		}
		if e.wave != r.Configs[root].ID {
			return fmt.Errorf("node %d in wave %d, not the leader's %d", i, e.wave, r.Configs[root].ID)
		}
		parent[i] = e.parent
	}
	if parent[root] != -1 {
		return fmt.Errorf("root %d has parent %d", root, parent[root])
	}
	for i, p := range parent {
		if i == root {
			continue
		}
		linked := false
		for _, q := range r.Links[i] {
			linked = linked || q == p
		}
		if !linked {
			return fmt.Errorf("node %d's parent %d is not a neighbour", i, p)
		}
	}
	// reached[i]: following parents from i ends at the root.
	reached := make([]bool, r.N)
	reached[root] = true
	for i := range parent {
		var path []int
		j := i
		for !reached[j] && len(path) <= r.N {
			path = append(path, j)
			j = parent[j]
		}
		if !reached[j] {
			return fmt.Errorf("node %d's parents form a cycle", i)
		}
		for _, k := range path {
			reached[k] = true
		}
	}
	return nil
}

func init() {
	for _, v := range []struct {
		variant, summary string
		one              bool
	}{
		{"", "echo with extinction on a random connected graph (mean degree 4), every node initiates: one leader, the highest initiator ID, and its wave's parents a spanning tree; bound 2m WAVE+ECHO a wave, plotted 2m·n with m ≤ 2n", false},
		{"one", "echo on a random connected graph (mean degree 4), one seeded initiator, the others woken by its wave: it leads, its parents a spanning tree; 2m WAVE+ECHO exactly, plotted at m ≤ 2n", true},
	} {
		v := v
		initiators := func(n int) float64 { return float64(n) }
		if v.one {
			initiators = func(int) float64 { return 1 }
		}
		register(Algorithm{
			Name: "echo", Variant: v.variant, Summary: v.summary,
			Scenario: func(n int, seed int64) Scenario {
				sc := Scenario{N: n, Seed: seed, Topology: Graph, Degree: echoDegree}
				if v.one {
					rng := rand.New(rand.NewPCG(uint64(seed), 0x6563686f))
					sc.Initiators = []int{rng.IntN(n)}
				}
				return sc
			},
			New: newEcho, Check: checkEcho,
			Bound:      func(n int) float64 { return 2 * float64(echoMaxEdges(n)) * initiators(n) },
			BoundKinds: []string{"WAVE", "ECHO"},
			Sizes:      []int{8, 16, 32, 64, 128, 256, 512}, Quick: []int{16, 64},
		})
	}
}
