package elections

import (
	"fmt"
	"math"
	"time"
)

// itaiRodeh is Itai and Rodeh's election on an anonymous unidirectional
// ring of known size n, here asynchronous with FIFO links (the runner's
// links are FIFO; the algorithm needs it), in the form with round numbers
// given by Fokkink. Nodes have no IDs (Config.ID is ignored): each active
// node draws an ID in 1..n from its Config.Rand and sends ELECTION (id,
// round, hop 1, bit false) to its successor. A passive node forwards
// every ELECTION with hop+1. An active node that gets one compares (round,
// id) with its own: a higher one makes it passive and is forwarded, a
// lower one is dropped, an equal one is forwarded with the bit set (some
// other node drew the same). Its own message comes back with hop n: bit
// false, it is the only one left and leads; bit true, it draws again and
// starts the next round (phase) with the other nodes that tied with it.
// The leader then sends LEADER around the ring once (n messages).
//
// The nodes are anonymous, and so is the LEADER message: it carries its hop
// count, so a node knows the leader is that many hops upstream; Leader
// turns this into the runner's index (the successor of i is i+1 on a
// Ring).
type itaiRodeh struct {
	cfg       Config
	started   bool
	active    bool
	id, round int
	// hops is how far upstream the leader is (0: the node itself, −1: not
	// known yet); phases the number of phases of the election, once known.
	hops, phases int
}

type itaiRodehElection struct {
	ID, Round, Hop int
	Tied           bool
}
type itaiRodehLeader struct{ Hop, Phases int }

func (itaiRodehElection) Kind() string { return "ELECTION" }
func (itaiRodehLeader) Kind() string   { return "LEADER" }
func (m itaiRodehElection) String() string {
	return fmt.Sprintf("id %d round %d hop %d tied %v", m.ID, m.Round, m.Hop, m.Tied)
}
func (m itaiRodehLeader) String() string {
	return fmt.Sprintf("hop %d after %d phases", m.Hop, m.Phases)
}

func newItaiRodeh(c Config) Node { return &itaiRodeh{cfg: c, hops: -1} }

// Phases is the number of phases (rounds of random draws) the election
// took, 1 when the first draw had a unique highest ID; 0 until the node
// knows the election is over (it is the leader or has got LEADER).
func (n *itaiRodeh) Phases() int { return n.phases }

func (n *itaiRodeh) next() int { return n.cfg.Neighbors[0] }

// Start makes an initiator active; other nodes stay passive and only
// forward.
func (n *itaiRodeh) Start(_ time.Duration, o *Out) {
	if n.started {
		return
	}
	n.started = true
	if n.cfg.Initiator {
		n.active = true
		n.draw(1, o)
	}
}

// draw starts round r with a fresh random ID.
func (n *itaiRodeh) draw(r int, o *Out) {
	n.round, n.id = r, n.cfg.Rand.IntN(n.cfg.N)+1
	o.Send(n.next(), itaiRodehElection{ID: n.id, Round: r, Hop: 1})
}

func (n *itaiRodeh) Receive(_ time.Duration, _ int, m Message, o *Out) {
	switch m := m.(type) {
	case itaiRodehElection:
		n.election(m, o)
	case itaiRodehLeader:
		if m.Hop >= n.cfg.N {
			return // back at the leader
		}
		n.hops, n.phases = m.Hop, m.Phases
		m.Hop++
		o.Send(n.next(), m)
	}
}

func (n *itaiRodeh) election(m itaiRodehElection, o *Out) {
	own := m.Hop >= n.cfg.N // n hops from its sender: it is back home
	if !n.active {
		if !own {
			m.Hop++
			o.Send(n.next(), m)
		}
		return
	}
	switch {
	case own && m.Round == n.round && m.ID == n.id:
		if m.Tied {
			n.draw(n.round+1, o)
			return
		}
		n.active = false
		n.hops, n.phases = 0, n.round
		o.Send(n.next(), itaiRodehLeader{Hop: 1, Phases: n.round})
	case own:
		// An earlier round's message of this node: cannot happen on FIFO
		// links, as the node moves on only when its message is back.
	case m.Round > n.round || (m.Round == n.round && m.ID > n.id):
		n.active = false
		m.Hop++
		o.Send(n.next(), m)
	case m.Round == n.round && m.ID == n.id:
		m.Hop++
		m.Tied = true
		o.Send(n.next(), m)
	}
	// A lower (round, id) is dropped.
}

func (n *itaiRodeh) Timeout(time.Duration, int, *Out) {}

func (n *itaiRodeh) Leader() int {
	if n.hops < 0 {
		return -1
	}
	return ((n.cfg.Index-n.hops)%n.cfg.N + n.cfg.N) % n.cfg.N
}

// checkItaiRodeh wants exactly one leader, named by every live node; with
// anonymous nodes any one is right. It also wants every node to know the
// same number of phases.
func checkItaiRodeh(r Result) Verdict {
	ls := r.LiveLeaders()
	if len(ls) != 1 || ls[0] < 0 {
		return Verdict{Note: fmt.Sprintf("live nodes name %v", ls)}
	}
	p := r.Nodes[ls[0]].(*itaiRodeh).phases
	for i, nd := range r.Nodes {
		if q := nd.(*itaiRodeh).phases; r.Live[i] && q != p {
			return Verdict{Note: fmt.Sprintf("node %d knows %d phases, the leader %d", i, q, p)}
		}
	}
	return Verdict{OneLeader: true, RightLeader: true}
}

// itaiRodehPhases is e/(e−1), the bound on the expected number of phases
// (the exact expectation with draws in 1..n is below it from n = 5 on, and
// tends to about 1.42).
var itaiRodehPhases = math.E / (math.E - 1)

func init() {
	register(Algorithm{
		Name: "itai-rodeh",
		Summary: "anonymous asynchronous FIFO unidirectional ring of known n, random IDs in 1..n redrawn by the tied: exactly one leader, all naming it; " +
			"bound n² ELECTION hops a phase × e/(e−1) expected phases (an upper bound on the expected count for n ≥ 5; measured means are O(n log n))",
		Scenario: func(n int, seed int64) Scenario { return Scenario{N: n, Seed: seed, Topology: Ring} },
		New:      newItaiRodeh, Check: checkItaiRodeh,
		Bound:      func(n int) float64 { return float64(n) * float64(n) * itaiRodehPhases },
		BoundKinds: []string{"ELECTION"},
		Sizes:      []int{8, 16, 32, 64, 128, 256, 512}, Quick: []int{16, 64},
	})
}
