package elections

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// tanRing is Tanenbaum's token-less ring election. The processes form a
// logical ring in index order, each knowing the order. An initiator sends
// ELECTION, carrying the list of the processes it has passed, to its
// successor; each process adds itself and passes it on. Every hop is
// answered by an ACK: a process that gets none within T (a round trip at
// the largest delay and a margin) takes its successor for crashed and
// tries the next one, and keeps that one as its successor. The message
// that comes back to its initiator becomes a COORDINATOR naming the
// highest ID of the list and goes round once more. Concurrent initiators
// each send their own; all name the same coordinator.
//
// The ring is logical: the run's graph is complete, since skipping a
// crashed successor takes a link to the one after it.
type tanRing struct {
	cfg     Config
	leader  int
	started bool
	// succ is the successor this process last found up.
	succ int
	// hop numbers this process's sends; pending are those not yet
	// acknowledged.
	hop     int
	pending map[int]tanPending
}

type tanPending struct {
	to  int
	msg tanHop
}

// tanMember is one process on an ELECTION's list.
type tanMember struct{ Index, ID int }

// tanHop is an ELECTION or a COORDINATOR on one hop, numbered by its
// sender for the ACK.
type tanHop interface {
	Message
	withHop(int) tanHop
}

type tanElection struct {
	Origin, Hop int
	List        []tanMember
}

type tanCoordinator struct {
	Origin, Hop int
	Leader      tanMember
	List        []tanMember
}

type tanAck struct{ Hop int }

func (tanElection) Kind() string    { return "ELECTION" }
func (tanCoordinator) Kind() string { return "COORDINATOR" }
func (tanAck) Kind() string         { return "ACK" }

func (m tanElection) withHop(h int) tanHop    { m.Hop = h; return m }
func (m tanCoordinator) withHop(h int) tanHop { m.Hop = h; return m }

func (m tanElection) String() string {
	ids := make([]string, len(m.List))
	for i, p := range m.List {
		ids[i] = fmt.Sprint(p.ID)
	}
	return "ids " + strings.Join(ids, ",")
}
func (m tanCoordinator) String() string { return fmt.Sprintf("coordinator id %d", m.Leader.ID) }

func newTanRing(c Config) Node {
	return &tanRing{cfg: c, leader: -1, succ: (c.Index + 1) % c.N, pending: map[int]tanPending{}}
}

func (r *tanRing) t() time.Duration { return 2*r.cfg.MaxDelay + time.Millisecond }

func (r *tanRing) me() tanMember { return tanMember{r.cfg.Index, r.cfg.ID} }

// Start initiates an election at an initiator's start, a Wake or a
// recovery.
func (r *tanRing) Start(now time.Duration, o *Out) {
	first := !r.started
	r.started = true
	if r.cfg.Initiator || !first || now > 0 {
		r.pass(tanElection{Origin: r.cfg.Index, List: []tanMember{r.me()}}, o)
	}
}

// pass sends m to the successor and waits for its ACK.
func (r *tanRing) pass(m tanHop, o *Out) {
	r.hop++
	m = m.withHop(r.hop)
	r.pending[r.hop] = tanPending{to: r.succ, msg: m}
	o.Send(r.succ, m)
	o.After(r.t(), r.hop)
}

func (r *tanRing) Receive(_ time.Duration, from int, m Message, o *Out) {
	switch m := m.(type) {
	case tanAck:
		delete(r.pending, m.Hop)
	case tanElection:
		o.Send(from, tanAck{Hop: m.Hop})
		for _, p := range m.List {
			if p.Index == r.cfg.Index {
				// Round: this process is the initiator (or takes its place,
				// if the initiator has gone).
				r.announce(m.List, o)
				return
			}
		}
		list := make([]tanMember, len(m.List), len(m.List)+1)
		copy(list, m.List)
		r.pass(tanElection{Origin: m.Origin, List: append(list, r.me())}, o)
	case tanCoordinator:
		o.Send(from, tanAck{Hop: m.Hop})
		r.leader = m.Leader.Index
		if m.Origin != r.cfg.Index {
			r.pass(m, o)
		}
	}
}

// announce sends COORDINATOR round, naming the highest ID of list.
func (r *tanRing) announce(list []tanMember, o *Out) {
	best := list[0]
	for _, p := range list {
		if p.ID > best.ID {
			best = p
		}
	}
	r.leader = best.Index
	r.pass(tanCoordinator{Origin: r.cfg.Index, Leader: best, List: list}, o)
}

// Timeout: no ACK, the process sent to has crashed; try the next one.
func (r *tanRing) Timeout(_ time.Duration, hop int, o *Out) {
	p, ok := r.pending[hop]
	if !ok {
		return
	}
	delete(r.pending, hop)
	next := (p.to + 1) % r.cfg.N
	if r.succ == p.to {
		r.succ = next
	}
	r.pending[hop] = tanPending{to: next, msg: p.msg}
	o.Send(next, p.msg)
	o.After(r.t(), hop)
}

func (r *tanRing) Leader() int { return r.leader }

// tanInitiators is k distinct seeded random processes.
func tanInitiators(n, k int, seed int64) []int {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x72696e67))
	return rng.Perm(n)[:min(k, n)]
}

func init() {
	sizes, quick := []int{8, 16, 32, 64, 128, 256, 512}, []int{16, 64}
	const concurrent = 3
	for _, v := range []struct {
		variant, summary string
		scenario         func(n int, seed int64) Scenario
		bound            func(n int) float64
	}{
		{"", "logical ring on a complete graph, one initiator, all up: one coordinator, the highest ID; n ELECTION and n COORDINATOR hops, 2n exactly (and 2n ACK, not counted)",
			func(n int, seed int64) Scenario {
				return Scenario{N: n, Seed: seed, Topology: Complete, Initiators: tanInitiators(n, 1, seed)}
			}, func(n int) float64 { return float64(2 * n) }},
		{"concurrent", "three initiators at once, each message goes round: all name the highest ID; 2n per initiator exactly",
			func(n int, seed int64) Scenario {
				return Scenario{N: n, Seed: seed, Topology: Complete, Initiators: tanInitiators(n, concurrent, seed)}
			}, func(n int) float64 { return float64(2 * n * min(concurrent, n)) }},
		{"crashed", "a quarter of the processes (not the initiator) crashed from the start and skipped after a missing ACK: the highest live ID; 2n−c for c crashed",
			func(n int, seed int64) Scenario {
				first := tanInitiators(n, 1, seed)
				sc := Scenario{N: n, Seed: seed, Topology: Complete, Initiators: first}
				for _, i := range CrashSome(n, n/4, seed, first[0]) {
					sc.Faults = append(sc.Faults, Fault{At: 0, Kind: Crash, Node: i})
				}
				return sc
			}, func(n int) float64 { return float64(2 * n) }},
	} {
		register(Algorithm{
			Name: "ring", Variant: v.variant, Summary: v.summary,
			Scenario: v.scenario, New: newTanRing, Check: CheckMaxID,
			Bound: v.bound, BoundKinds: []string{"ELECTION", "COORDINATOR"},
			Sizes: sizes, Quick: quick,
		})
	}
}
