package elections

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// timeSlice is Lynch's TimeSlice election on a synchronous unidirectional
// ring of known size n. IDs are never compared, only counted: time is cut
// into rounds of length R (timeSliceRound: longer than any one-way delay,
// so a message sent at a round's start arrives within it), and phase v is
// rounds (v−1)n+1 .. vn. In phase v only the node with ID v may act: if it
// has seen no token by the phase's first round, it takes itself for leader
// and sends a TOKEN to its successor; every other node that gets the token
// takes its sender for leader and forwards it at the next round's start,
// and the token is swallowed when it is back at its origin. The lowest ID
// m wins; the token's n hops take rounds (m−1)n+1 .. mn, so the last node
// learns the leader in round mn−1 and the token is home in round mn: n
// TOKEN messages exactly.
//
// A node need not wake every round: it ticks at each phase's start (a
// timer n·R on) until it has seen a token, and sets a timer for the next
// round's start to forward one; the run thus ends at time mn·R, the phase
// boundary at which the last waiting nodes see the election is over.
type timeSlice struct {
	cfg     Config
	r       time.Duration
	started bool
	// seen: the node has sent or got a token and will send no token of its
	// own; fwd is a token to forward at the next round.
	seen   bool
	fwd    *timeSliceToken
	leader int
}

type timeSliceToken struct{ Leader, ID int }

func (timeSliceToken) Kind() string     { return "TOKEN" }
func (m timeSliceToken) String() string { return fmt.Sprintf("leader id %d", m.ID) }

// Timer tags of timeSlice.
const (
	timeSlicePhase = iota
	timeSliceForward
)

// timeSliceRound is the round length R for a largest one-way delay d: d
// and a margin of a tenth, at least a millisecond.
func timeSliceRound(d time.Duration) time.Duration { return d + max(d/10, time.Millisecond) }

func newTimeSlice(c Config) Node {
	return &timeSlice{cfg: c, r: timeSliceRound(c.MaxDelay), leader: -1}
}

func (n *timeSlice) phaseLen() time.Duration { return time.Duration(n.cfg.N) * n.r }

// Start starts the node's clock: at time 0 (all nodes start together) it
// is the first phase's start; a later Start waits for the next phase.
func (n *timeSlice) Start(now time.Duration, o *Out) {
	if n.started {
		return
	}
	n.started = true
	if now%n.phaseLen() == 0 {
		n.tick(now, o)
		return
	}
	o.After(n.phaseLen()-now%n.phaseLen(), timeSlicePhase)
}

// tick runs at a phase's start: in the node's own phase it sends its
// token unless it has seen one; before it, it waits for the next phase.
func (n *timeSlice) tick(now time.Duration, o *Out) {
	if n.seen {
		return
	}
	phase := int(now/n.phaseLen()) + 1
	switch {
	case phase == n.cfg.ID:
		n.seen = true
		n.leader = n.cfg.Index
		o.Send(n.cfg.Neighbors[0], timeSliceToken{Leader: n.cfg.Index, ID: n.cfg.ID})
	case phase < n.cfg.ID:
		o.After(n.phaseLen(), timeSlicePhase)
	}
}

func (n *timeSlice) Receive(now time.Duration, _ int, m Message, o *Out) {
	t, ok := m.(timeSliceToken)
	if !ok || t.Leader == n.cfg.Index {
		return // the node's own token is home
	}
	n.seen = true
	n.leader = t.Leader
	n.fwd = &t
	// A message sent at a round's start arrives within the round; the
	// node sends on at the next one's start.
	o.After(n.r-now%n.r, timeSliceForward)
}

func (n *timeSlice) Timeout(now time.Duration, tag int, o *Out) {
	switch tag {
	case timeSlicePhase:
		n.tick(now, o)
	case timeSliceForward:
		if n.fwd != nil {
			o.Send(n.cfg.Neighbors[0], *n.fwd)
			n.fwd = nil
		}
	}
}

func (n *timeSlice) Leader() int { return n.leader }

// CheckMinID is the Check of the elections that must elect the live node
// with the lowest ID (TimeSlice) and have every live node name it.
func CheckMinID(r Result) Verdict {
	ls := r.LiveLeaders()
	if len(ls) != 1 || ls[0] < 0 {
		return Verdict{Note: fmt.Sprintf("live nodes name %v", ls)}
	}
	want := -1
	for i, c := range r.Configs {
		if r.Live[i] && (want < 0 || c.ID < r.Configs[want].ID) {
			want = i
		}
	}
	if ls[0] != want {
		return Verdict{OneLeader: true, Note: fmt.Sprintf("leader %d (ID %d), lowest live is %d (ID %d)", ls[0], r.Configs[ls[0]].ID, want, r.Configs[want].ID)}
	}
	return Verdict{OneLeader: true, RightLeader: true}
}

func init() {
	for _, v := range []struct {
		variant, summary string
		shift            bool
	}{
		{"", "synchronous unidirectional ring of known n, IDs 1..n counted not compared (ID v may send only in phase v of n rounds): one leader, the lowest ID, known to all in round n·min−1; n TOKEN messages exactly", false},
		{"large-min", "TimeSlice with IDs n+1..2n: the lowest ID still wins with n TOKEN messages exactly, but only after n·min = n(n+1) rounds", true},
	} {
		v := v
		register(Algorithm{
			Name: "timeslice", Variant: v.variant, Summary: v.summary,
			Scenario: func(n int, seed int64) Scenario {
				sc := Scenario{N: n, Seed: seed, Topology: Ring}
				if v.shift {
					rng := rand.New(rand.NewPCG(uint64(seed), 0x74696d65))
					sc.IDs = make([]int, n)
					for i, p := range rng.Perm(n) {
						sc.IDs[i] = n + 1 + p
					}
					// n(n+1) rounds run far past the default hour.
					sc.Limit = math.MaxInt64
				}
				return sc
			},
			New: newTimeSlice, Check: CheckMinID,
			Bound: func(n int) float64 { return float64(n) }, BoundKinds: []string{"TOKEN"},
			Sizes: []int{8, 16, 32, 64, 128, 256, 512}, Quick: []int{16, 64},
		})
	}
}
