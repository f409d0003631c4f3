package elections

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"time"
)

// Message is one algorithm message. Kind names it in counts and traces
// ("ELECTION", "OK", ...); a Message that is also a fmt.Stringer gives its
// trace entry's detail.
type Message interface {
	Kind() string
}

// Send is a message to the node with index To.
type Send struct {
	To  int
	Msg Message
}

// Timer asks for Timeout(Tag) After from now.
type Timer struct {
	After time.Duration
	Tag   int
}

// Out collects what one step of a node asks for.
type Out struct {
	Sends  []Send
	Timers []Timer
}

// Send queues a message to node to. A node may send to itself (a ring of
// one); that message arrives at once.
func (o *Out) Send(to int, m Message) { o.Sends = append(o.Sends, Send{To: to, Msg: m}) }

// After sets a timer: Timeout(tag) runs d from now unless the node crashed.
func (o *Out) After(d time.Duration, tag int) { o.Timers = append(o.Timers, Timer{After: d, Tag: tag}) }

// Node is one process of an election, a pure state machine.
type Node interface {
	// Start wakes the node: an initiator starts an election, a recovered
	// process (Bully) starts one too, others may only set timers.
	Start(now time.Duration, o *Out)
	// Receive handles a message from node from.
	Receive(now time.Duration, from int, m Message, o *Out)
	// Timeout handles a timer the node set.
	Timeout(now time.Duration, tag int, o *Out)
	// Leader is the index of the node this one takes for leader, or -1.
	Leader() int
}

// LinkObserver is a Node that is told when one of its links comes or goes
// (an ad hoc network's neighbour discovery).
type LinkObserver interface {
	LinkChanged(now time.Duration, peer int, up bool, o *Out)
}

// Config is what a node knows when it is made.
type Config struct {
	// Index is the node's place in the run, 0..N-1; messages are addressed
	// by index.
	Index, N int
	// ID is the node's unique identifier (a seeded permutation of
	// 1..N, so that ring order and ID order are unrelated); IDs holds
	// every node's, for algorithms in which every process knows the others'
	// (Bully). Anonymous algorithms ignore both.
	ID  int
	IDs []int
	// Neighbors are the node's links at the start: on a ring [successor,
	// predecessor]; on a complete graph every other node; on a graph its
	// adjacency.
	Neighbors []int
	// Capacity is the node's capability (Vasudevan et al.), seeded, in
	// [0, 1).
	Capacity float64
	// MaxDelay is the largest one-way delay between any two nodes: the
	// bound a synchronous algorithm's timeouts are built on.
	MaxDelay time.Duration
	// Initiator says whether the node starts an election at its Start.
	Initiator bool
	// Rand is the node's own seeded randomness.
	Rand *rand.Rand
}

// Topology is how the nodes are linked.
type Topology int

const (
	// Complete: every node can send to every other.
	Complete Topology = iota
	// Ring: node i's successor is i+1 mod N, its predecessor i-1; the
	// algorithm decides which directions it uses.
	Ring
	// Graph: a random connected graph (a ring through a seeded
	// permutation plus random chords, mean degree about Scenario.Degree).
	Graph
	// Geometric: nodes at seeded places in the unit square, linked within
	// Scenario.Radius (a wireless ad hoc network); with Scenario.Mobility
	// they move and links come and go.
	Geometric
)

func (t Topology) String() string {
	switch t {
	case Complete:
		return "complete"
	case Ring:
		return "ring"
	case Graph:
		return "graph"
	case Geometric:
		return "geometric"
	}
	return fmt.Sprintf("topology(%d)", int(t))
}

// FaultKind is what a Fault does.
type FaultKind int

const (
	// Crash stops a node: it loses its state, drops its messages and
	// timers.
	Crash FaultKind = iota
	// Recover makes a crashed node anew from its Config and starts it.
	Recover
	// Pause holds a node's inputs until Resume (it keeps its state).
	Pause
	// Resume delivers a paused node's held inputs in order.
	Resume
	// LinkDown and LinkUp take the link Node–Peer down or up (both
	// directions); messages in flight on a link that goes down are lost.
	LinkDown
	LinkUp
	// Wake calls Start again: the node starts an election now (a late
	// initiator, a process that noticed its coordinator is gone).
	Wake
)

func (k FaultKind) String() string {
	return [...]string{"crash", "recover", "pause", "resume", "link-down", "link-up", "wake"}[k]
}

// Fault is one event of a failure model.
type Fault struct {
	At   time.Duration
	Kind FaultKind
	Node int
	Peer int // LinkDown, LinkUp
}

// TraceEvent is one send or delivery of a traced run.
type TraceEvent struct {
	At       time.Duration
	From, To int
	// Deliver is false for the send, true for the delivery; Lost marks a
	// message dropped (crashed receiver or link down).
	Deliver, Lost bool
	Kind          string
	Detail        string
}

// Result is one run's outcome.
type Result struct {
	N int
	// Messages is every message sent; ByKind splits them by kind.
	Messages int
	ByKind   map[string]int
	// Agreed is when every live node last came to name one and the same
	// leader (−1 if they do not at the end), and MessagesAgreed the
	// messages sent by then.
	Agreed         time.Duration
	MessagesAgreed int
	// End is the time of the last event run (the run stops when nothing is
	// left to run or at Scenario.Limit).
	End time.Duration
	// Leaders is every node's Leader() at the end (−1 for crashed ones);
	// Live which nodes were up.
	Leaders []int
	Live    []bool
	// Nodes are the final states, for Check.
	Nodes []Node
	// Configs are the nodes' configurations; Links the topology at the
	// end (adjacency, for Check of per-component properties).
	Configs []Config
	Links   [][]int
	Trace   []TraceEvent
}

// LiveLeaders is the distinct leaders the live nodes name at the end (−1
// for a live node that names none), sorted.
func (r Result) LiveLeaders() []int {
	seen := map[int]bool{}
	var out []int
	for i, l := range r.Leaders {
		if r.Live[i] && !seen[l] {
			seen[l] = true
			out = append(out, l)
		}
	}
	sort.Ints(out)
	return out
}

// MaxLiveID is the index of the live node with the highest ID (−1 if none
// lives).
func (r Result) MaxLiveID() int {
	best := -1
	for i, c := range r.Configs {
		if r.Live[i] && (best < 0 || c.ID > r.Configs[best].ID) {
			best = i
		}
	}
	return best
}

// Verdict is a Check's judgement of a run.
type Verdict struct {
	// OneLeader: exactly one leader (per component, where components are
	// the unit), named by every live node.
	OneLeader bool
	// RightLeader: and it is the one the algorithm must elect.
	RightLeader bool
	// Note says what went wrong, if anything.
	Note string
}

// CheckMaxID is the Check of the elections that must elect the live node
// with the highest ID and have every live node name it.
func CheckMaxID(r Result) Verdict {
	ls := r.LiveLeaders()
	if len(ls) != 1 || ls[0] < 0 {
		return Verdict{Note: fmt.Sprintf("live nodes name %v", ls)}
	}
	want := r.MaxLiveID()
	if ls[0] != want {
		return Verdict{OneLeader: true, Note: fmt.Sprintf("leader %d (ID %d), highest live is %d (ID %d)", ls[0], r.Configs[ls[0]].ID, want, r.Configs[want].ID)}
	}
	return Verdict{OneLeader: true, RightLeader: true}
}
