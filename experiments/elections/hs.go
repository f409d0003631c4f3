package elections

import (
	"fmt"
	"math/bits"
	"time"
)

// hs is Hirschberg and Sinclair's election on a bidirectional ring. In
// phase k a process still in the running sends a PROBE of its ID out to
// distance 2^k in both directions; a process passes on a probe of a higher
// ID and swallows one of a lower; the process at distance 2^k sends a
// REPLY back. A process that gets both replies goes on to phase k+1; one
// that gets its own probe back has the highest ID and sends ELECTED round
// the ring once. Messages carry their direction, so that rings of one and
// two (where both neighbours are the same process) work as any other.
type hs struct {
	cfg    Config
	leader int
	// woken: Start has run; running: the process has begun phase 0.
	woken, running bool
	phase, replies int
}

// hsCW travels to successors (Neighbors[0]), hsCCW to predecessors
// (Neighbors[1]).
const (
	hsCW  = 0
	hsCCW = 1
)

type hsProbe struct{ ID, Phase, Hop, Dir int }
type hsReply struct{ ID, Phase, Dir int }
type hsElected struct{ Leader, ID int }

func (hsProbe) Kind() string   { return "PROBE" }
func (hsReply) Kind() string   { return "REPLY" }
func (hsElected) Kind() string { return "ELECTED" }
func (m hsProbe) String() string {
	return fmt.Sprintf("id %d phase %d hop %d", m.ID, m.Phase, m.Hop)
}
func (m hsReply) String() string   { return fmt.Sprintf("id %d phase %d", m.ID, m.Phase) }
func (m hsElected) String() string { return fmt.Sprintf("leader id %d", m.ID) }

func newHS(c Config) Node { return &hs{cfg: c, leader: -1} }

// send sends m on in direction dir.
func (n *hs) send(dir int, m Message, o *Out) { o.Send(n.cfg.Neighbors[dir], m) }

// probe starts the current phase.
func (n *hs) probe(o *Out) {
	n.replies = 0
	for _, d := range []int{hsCW, hsCCW} {
		n.send(d, hsProbe{ID: n.cfg.ID, Phase: n.phase, Hop: 1, Dir: d}, o)
	}
}

// Start starts phase 0 at an initiator's start or a Wake; the others start
// when a probe or reply first reaches them.
func (n *hs) Start(_ time.Duration, o *Out) {
	if n.cfg.Initiator || n.woken {
		n.wake(o)
	}
	n.woken = true
}

// wake begins phase 0 unless the process has already.
func (n *hs) wake(o *Out) {
	if !n.running {
		n.running = true
		n.probe(o)
	}
}

func (n *hs) Receive(_ time.Duration, _ int, m Message, o *Out) {
	switch m := m.(type) {
	case hsProbe:
		n.wake(o)
		switch {
		case m.ID == n.cfg.ID:
			// Round the ring: no higher ID. The probe of the other
			// direction comes round too and is dropped.
			if n.leader != n.cfg.Index {
				n.leader = n.cfg.Index
				n.send(hsCW, hsElected{Leader: n.cfg.Index, ID: n.cfg.ID}, o)
			}
		case m.ID > n.cfg.ID && m.Hop < 1<<m.Phase:
			m.Hop++
			n.send(m.Dir, m, o)
		case m.ID > n.cfg.ID:
			n.send(1-m.Dir, hsReply{ID: m.ID, Phase: m.Phase, Dir: 1 - m.Dir}, o)
		}
	case hsReply:
		n.wake(o)
		switch {
		case m.ID != n.cfg.ID:
			n.send(m.Dir, m, o)
		case m.Phase == n.phase && n.leader < 0:
			n.replies++
			if n.replies == 2 {
				n.phase++
				n.probe(o)
			}
		}
	case hsElected:
		if m.Leader != n.cfg.Index {
			n.leader = m.Leader
			n.send(hsCW, m, o)
		}
	}
}

func (n *hs) Timeout(time.Duration, int, *Out) {}
func (n *hs) Leader() int                      { return n.leader }

// hsBound is Hirschberg and Sinclair's 8n(1+⌈log2 n⌉) PROBE and REPLY
// messages.
func hsBound(n int) float64 { return float64(8 * n * (1 + bits.Len(uint(n-1)))) }

func init() {
	register(Algorithm{
		Name: "hs", Summary: "bidirectional ring, unique random IDs, every node initiates, probes to distance 2^k in phase k: one leader, the highest ID; PROBE+REPLY within 8n(1+⌈log2 n⌉), ELECTED (n) not counted",
		Scenario: func(n int, seed int64) Scenario { return Scenario{N: n, Seed: seed, Topology: Ring} },
		New:      newHS, Check: CheckMaxID, Bound: hsBound, BoundKinds: []string{"PROBE", "REPLY"},
		Sizes: []int{8, 16, 32, 64, 128, 256, 512, 1024}, Quick: []int{16, 64},
	})
}
