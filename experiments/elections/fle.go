package elections

import (
	"fmt"
	"time"
)

// FLE is ZooKeeper's FastLeaderElection (FastLeaderElection.lookForLeader)
// on an ensemble of n servers that all see each other. A server's vote
// proposes a leader by (epoch, zxid, sid): the epoch of the last leader it
// followed, its last transaction id, and its server id (here its ID). A
// LOOKING server starts a round (its logical clock, the election epoch)
// proposing itself and notifies everyone; it takes a better vote it hears
// (higher epoch, then zxid, then sid) and notifies everyone again; a
// notification of a later round makes it join that round. When a quorum
// (more than n/2 of the ensemble, itself included) votes as it does, it
// waits finalizeWait for a better vote; if none comes, it is LEADING (its
// own vote) or FOLLOWING. A server that has decided answers a LOOKING
// server with its final vote, and a LOOKING server that sees a quorum
// decided on a leader that says it is LEADING follows it too.
//
// What is not modelled: Zab's discovery and synchronisation after the
// election, and the reconnection loop of the real QuorumCnxManager (links
// do not fail here).
type fle struct {
	cfg         Config
	epoch, zxid int64
	state       fleState
	// clock is the logical clock: the round this server is in.
	clock int64
	vote  fleVote
	// recv are the votes of this round, out those of servers that have
	// decided, by sender.
	recv, out map[int]fleRecord
	// finalizing: a quorum has the server's vote and it waits for a better
	// one.
	finalizing bool
	notTimeout time.Duration
	// deadline is when each wait (finalize, idle) ends; armed says a timer
	// for it is set. A timer is set only when none is, and one that fires
	// before its wait's deadline sets the next: one timer per wait, not
	// one per notification.
	deadline [2]time.Duration
	armed    [2]bool
}

// fleState is a server's peer state.
type fleState int

const (
	fleLooking fleState = iota
	fleFollowing
	fleLeading
)

func (s fleState) String() string { return [...]string{"LOOKING", "FOLLOWING", "LEADING"}[s] }

// fleVote is a proposed leader: its index (to address it) and what it is
// ordered by.
type fleVote struct {
	Leader int
	Sid    int
	Zxid   int64
	Epoch  int64
}

// better is ZooKeeper's totalOrderPredicate: v wins over w.
func (v fleVote) better(w fleVote) bool {
	if v.Epoch != w.Epoch {
		return v.Epoch > w.Epoch
	}
	if v.Zxid != w.Zxid {
		return v.Zxid > w.Zxid
	}
	return v.Sid > w.Sid
}

func (v fleVote) String() string {
	return fmt.Sprintf("sid %d (epoch %d, zxid %#x)", v.Sid, v.Epoch, v.Zxid)
}

// fleRecord is a vote received: the vote, the sender's round and state.
type fleRecord struct {
	Vote  fleVote
	Round int64
	State fleState
}

// fleNotification is FLE's one message: the sender's vote, round and
// state.
type fleNotification fleRecord

func (fleNotification) Kind() string { return "NOTIFICATION" }
func (m fleNotification) String() string {
	return fmt.Sprintf("%v round %d %v", m.Vote, m.Round, m.State)
}

const (
	// finalizeWait is how long a server with a quorum waits for a better
	// vote (ZooKeeper's finalizeWait, 200 ms): longer than any one-way
	// delay here.
	finalizeWait = 200 * time.Millisecond
	// maxNotificationInterval caps the doubling wait after which a LOOKING
	// server that hears nothing notifies everyone again.
	maxNotificationInterval = 60 * time.Second

	fleFinalize = 0
	fleIdle     = 1
)

// newFLE makes a server with a seeded history: an epoch of 1 to 3, a zxid
// in that epoch (epoch << 32 | counter, counters small enough that equal
// zxids happen and the sid decides). A recovered server draws anew.
func newFLE(c Config) Node {
	epoch := int64(1 + c.Rand.IntN(3))
	return &fle{cfg: c, epoch: epoch, zxid: epoch<<32 | int64(c.Rand.IntN(16))}
}

func (n *fle) self() fleVote {
	return fleVote{Leader: n.cfg.Index, Sid: n.cfg.ID, Zxid: n.zxid, Epoch: n.epoch}
}

// Start boots the server: it begins looking at once, in a step of its own
// (a timer of zero), so that a server crashed at time 0 never votes.
func (n *fle) Start(now time.Duration, o *Out) {
	n.state = fleLooking
	n.vote = n.self()
	n.wait(fleIdle, now, now, o)
}

// wait makes the wait of kind end at at.
func (n *fle) wait(kind int, at, now time.Duration, o *Out) {
	n.deadline[kind] = at
	if !n.armed[kind] {
		n.armed[kind] = true
		o.After(at-now, kind)
	}
}

// lookForLeader starts a round.
func (n *fle) lookForLeader(now time.Duration, o *Out) {
	n.clock++
	n.recv, n.out = map[int]fleRecord{}, map[int]fleRecord{}
	n.notTimeout = finalizeWait
	n.propose(n.self(), o)
	n.checkQuorum(now, o)
}

// checkQuorum starts the wait for a better vote once a quorum has the
// server's.
func (n *fle) checkQuorum(now time.Duration, o *Out) {
	if !n.finalizing && n.quorum(n.recv, n.vote, n.clock) {
		n.finalizing = true
		n.wait(fleFinalize, now+finalizeWait, now, o)
	}
}

// propose takes v as the server's vote and notifies every server of it
// (itself included: its own vote counts towards its quorum).
func (n *fle) propose(v fleVote, o *Out) {
	n.vote = v
	n.recv[n.cfg.Index] = fleRecord{Vote: v, Round: n.clock, State: fleLooking}
	for i := 0; i < n.cfg.N; i++ {
		if i != n.cfg.Index {
			o.Send(i, n.notification())
		}
	}
}

func (n *fle) notification() fleNotification {
	return fleNotification{Vote: n.vote, Round: n.clock, State: n.state}
}

func (n *fle) Receive(now time.Duration, from int, m Message, o *Out) {
	nt, ok := m.(fleNotification)
	if !ok {
		return
	}
	if n.state != fleLooking {
		// A decided server tells a LOOKING one what it decided.
		if nt.State == fleLooking {
			o.Send(from, n.notification())
		}
		return
	}
	if n.recv == nil {
		// Not started yet: the boot timer has not fired.
		n.lookForLeader(now, o)
	}
	if nt.State == fleLooking && nt.Round < n.clock {
		// WorkerReceiver: a server behind is told the current round.
		o.Send(from, n.notification())
	}
	if n.finalizing {
		// The wait after a quorum: a better vote ends it and is handled
		// below; any other notification is dropped and the wait starts
		// over.
		if !nt.Vote.better(n.vote) {
			n.wait(fleFinalize, now+finalizeWait, now, o)
			return
		}
		n.finalizing = false
	}
	n.wait(fleIdle, now+n.notTimeout, now, o)
	rec := fleRecord(nt)
	switch nt.State {
	case fleLooking:
		switch {
		case nt.Round > n.clock:
			n.clock = nt.Round
			n.recv = map[int]fleRecord{}
			if nt.Vote.better(n.self()) {
				n.propose(nt.Vote, o)
			} else {
				n.propose(n.self(), o)
			}
		case nt.Round < n.clock:
			return
		case nt.Vote.better(n.vote):
			n.propose(nt.Vote, o)
		}
		n.recv[from] = rec
		n.checkQuorum(now, o)
	default:
		if nt.Round == n.clock {
			n.recv[from] = rec
			if n.quorum(n.recv, nt.Vote, nt.Round) && n.checkLeader(nt.Vote.Leader, nt.Round) {
				n.decide(nt.Vote)
				return
			}
		}
		n.out[from] = rec
		if n.quorum(n.out, nt.Vote, nt.Round) && n.checkLeader(nt.Vote.Leader, nt.Round) {
			n.clock = nt.Round
			n.decide(nt.Vote)
		}
	}
}

// quorum is termPredicate: more than half the ensemble cast vote v in
// round r.
func (n *fle) quorum(votes map[int]fleRecord, v fleVote, r int64) bool {
	c := 0
	for _, rec := range votes {
		if rec.Vote == v && rec.Round == r {
			c++
		}
	}
	return 2*c > n.cfg.N
}

// checkLeader: a server follows another only once that one said it is
// LEADING in round r; it leads only in its own round.
func (n *fle) checkLeader(leader int, r int64) bool {
	if leader == n.cfg.Index {
		return n.clock == r
	}
	rec, ok := n.out[leader]
	return ok && rec.State == fleLeading
}

func (n *fle) decide(v fleVote) {
	n.vote = v
	n.finalizing = false
	if v.Leader == n.cfg.Index {
		n.state = fleLeading
	} else {
		n.state = fleFollowing
	}
}

func (n *fle) Timeout(now time.Duration, kind int, o *Out) {
	n.armed[kind] = false
	if n.state != fleLooking {
		return
	}
	if now < n.deadline[kind] {
		n.wait(kind, n.deadline[kind], now, o)
		return
	}
	switch {
	case kind == fleIdle && n.recv == nil:
		n.lookForLeader(now, o)
		n.wait(fleIdle, now+n.notTimeout, now, o)
	case kind == fleIdle && !n.finalizing:
		// Nothing heard for notTimeout: notify everyone again.
		for i := 0; i < n.cfg.N; i++ {
			if i != n.cfg.Index {
				o.Send(i, n.notification())
			}
		}
		n.notTimeout = min(2*n.notTimeout, maxNotificationInterval)
		n.wait(fleIdle, now+n.notTimeout, now, o)
	case kind == fleFinalize && n.finalizing:
		n.decide(n.vote)
	}
}

// Leader is the server this one follows or itself if leading; -1 while
// looking.
func (n *fle) Leader() int {
	if n.state == fleLooking {
		return -1
	}
	return n.vote.Leader
}

// CheckFLE judges a FastLeaderElection run: every live server has
// decided; one leads and every live server names it; no two lead in one
// round; and the leader's (epoch, zxid, sid) is the highest of the live
// servers (here every live server took part from the start, and
// finalizeWait outlasts any delay, so the quorum that decided saw every
// live vote).
func CheckFLE(r Result) Verdict {
	byRound := map[int64][]int{}
	var best *fle
	for i, nd := range r.Nodes {
		if !r.Live[i] {
			continue
		}
		s := nd.(*fle)
		if s.state == fleLooking {
			return Verdict{Note: fmt.Sprintf("server %d still LOOKING", i)}
		}
		if s.state == fleLeading {
			byRound[s.clock] = append(byRound[s.clock], i)
		}
		if best == nil || s.self().better(best.self()) {
			best = s
		}
	}
	for round, ls := range byRound {
		if len(ls) > 1 {
			return Verdict{Note: fmt.Sprintf("servers %v all LEADING in round %d", ls, round)}
		}
	}
	ls := r.LiveLeaders()
	if len(ls) != 1 || ls[0] < 0 {
		return Verdict{Note: fmt.Sprintf("live servers name %v", ls)}
	}
	l := ls[0]
	if !r.Live[l] || r.Nodes[l].(*fle).state != fleLeading {
		return Verdict{Note: fmt.Sprintf("live servers follow %d, which is not LEADING", l)}
	}
	if l != best.cfg.Index {
		return Verdict{OneLeader: true, Note: fmt.Sprintf("leader %v, best live %v", r.Nodes[l].(*fle).self(), best.self())}
	}
	return Verdict{OneLeader: true, RightLeader: true}
}

func init() {
	for _, v := range []struct {
		variant, summary string
		down             func(n int) int
	}{
		{"", "ZooKeeper FastLeaderElection, every server up: one LEADING, all follow it, it has the highest (epoch, zxid, sid)", func(int) int { return 0 }},
		{"minority-down", "FastLeaderElection with ⌊(n−1)/2⌋ servers crashed at the start: the quorum elects the highest (epoch, zxid, sid) among the live", func(n int) int { return (n - 1) / 2 }},
	} {
		v := v
		register(Algorithm{
			Name: "fle", Variant: v.variant, Summary: v.summary,
			Scenario: func(n int, seed int64) Scenario {
				sc := Scenario{N: n, Seed: seed, Topology: Complete}
				for _, i := range CrashSome(n, v.down(n), seed) {
					sc.Faults = append(sc.Faults, Fault{At: 0, Kind: Crash, Node: i})
				}
				return sc
			},
			New: newFLE, Check: CheckFLE,
			Sizes: []int{3, 5, 7, 9, 15, 31, 63, 127}, Quick: []int{5, 15},
		})
	}
}
