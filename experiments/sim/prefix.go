package sim

import (
	"strconv"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/superpeer-overlay/superpeer/dht"
	"github.com/superpeer-overlay/superpeer/experiments/metrics"
	"github.com/superpeer-overlay/superpeer/superpeer"
)

// PrefixResult is the outcome of the prefix method over a set of live peers.
type PrefixResult struct {
	// Leader is, per group, the index of its superpeer, or -1 for an empty
	// group.
	Leader []int
	// Superpeers lists the superpeers in ascending index order.
	Superpeers []int
	// Group is every peer's group.
	Group []int32
	// Assignment gives every peer's superpeer (capacity applied).
	Assignment metrics.Assignment
	// Overflow counts clients sent to another group's superpeer because
	// their own was full.
	Overflow int
	// Lookups and Requests count the DHT lookups and the attach requests
	// (renewals included) the peers made; Seconds is the virtual time the
	// run took, until every peer was served or prefixLimit.
	Lookups, Requests int
	Seconds           float64
}

// The network the prefix simulation stands in for: every message takes
// prefixHop, a lookup prefixLookup (a converged DHT's few round trips); a
// run ends when every peer is served, or at prefixLimit.
const (
	prefixHop    = 25 * time.Millisecond
	prefixLookup = 6 * prefixHop
	prefixLimit  = time.Hour
)

// Prefix runs the prefix method on keys (all peers live, all started at
// once): every peer runs superpeer.PrefixCore, the live selector's
// decisions, with PrefixSelector's default periods, on virtual time. A
// lookup of a group key answers with the peer XOR-closest to it among all
// the keys, as a converged DHT's does; an attach request is answered by the
// superpeer's superpeer.AttachTable (capacity C, or unbounded for C ≤ 0),
// the live attach server's rule, or NOT_SUPERPEER (prompting a recheck)
// while that peer does not know it is one. So every peer of a group finds
// the same superpeer, which is a superpeer iff it is the group member
// XOR-closest to the group key; a client whose superpeer is full walks the
// other groups' superpeers by superpeer.Prefix.GroupsByDistance, three
// groups a step, as the live selector does. Peer i is named by the decimal
// string of i; every message takes prefixHop. The result is a function of
// the keys and C: the order in which clients come is that of their first
// steps (spread over the start by key), not their indices.
func Prefix(keys []dht.Key, scheme superpeer.Prefix, capacity int) PrefixResult {
	r, err := simulatePrefix(keys, scheme, max(0, capacity), defaultAttachTTL)
	if err != nil {
		panic(err) // the default periods are valid
	}
	return r
}

type prefixSim struct {
	loop     *Loop
	scheme   superpeer.Prefix
	keys     []dht.Key
	ids      []peer.ID
	cores    []*superpeer.PrefixCore
	tables   []*superpeer.AttachTable // a superpeer's clients, nil until it has one
	answer   []int                    // per group, the peer a lookup of its key answers (-1: not known yet)
	wake     []time.Duration          // per peer, the Tick scheduled, -1 for none
	served   []bool
	unserved int
	capacity int           // C of every superpeer
	ttl      time.Duration // the attach TTL
	res      PrefixResult
	onAttach func(i int) // peer i asks a superpeer to take it anew (PrefixRescheme)
}

// defaultAttachTTL is superpeer.NewAttach's default TTL.
const defaultAttachTTL = 30 * time.Second

func simulatePrefix(keys []dht.Key, scheme superpeer.Prefix, capacity int, ttl time.Duration) (PrefixResult, error) {
	s, err := newPrefixSim(keys, scheme, capacity, ttl)
	if err != nil {
		return PrefixResult{}, err
	}
	s.loop.RunWhile(prefixLimit, func() bool { return s.unserved > 0 })
	s.res.Seconds = s.loop.Now().Seconds()
	s.result()
	return s.res, nil
}

func newPrefixSim(keys []dht.Key, scheme superpeer.Prefix, capacity int, ttl time.Duration) (*prefixSim, error) {
	n := len(keys)
	s := &prefixSim{
		loop: &Loop{}, keys: keys, capacity: capacity, ttl: ttl,
		ids: make([]peer.ID, n), cores: make([]*superpeer.PrefixCore, n), tables: make([]*superpeer.AttachTable, n),
		wake: make([]time.Duration, n), served: make([]bool, n), unserved: n,
	}
	s.useScheme(scheme)
	for i := range keys {
		s.ids[i] = peer.ID(strconv.Itoa(i))
		c, err := superpeer.NewPrefixCore(s.ids[i], keys[i], scheme, superpeer.WithTTL(ttl))
		if err != nil {
			return nil, err
		}
		s.cores[i], s.wake[i] = c, -1
	}
	for i, c := range s.cores {
		s.apply(i, c.Tick(epoch0))
	}
	return s, nil
}

// useScheme makes scheme the code the simulation answers lookups by: the
// group member XOR-closest to a group key is the closest of all peers (the
// others differ from it within the group's prefix).
func (s *prefixSim) useScheme(scheme superpeer.Prefix) {
	G, n := scheme.Groups(), len(s.keys)
	s.scheme = scheme
	s.answer = make([]int, G)
	for g := range s.answer {
		s.answer[g] = -1
	}
	s.res = PrefixResult{Leader: make([]int, G), Group: make([]int32, n), Assignment: make(metrics.Assignment, n)}
	for i, k := range s.keys {
		g := scheme.Group(k)
		s.res.Group[i] = int32(g)
		if a := s.answer[g]; a < 0 || scheme.GroupKey(g).Closer(k, s.keys[a]) {
			s.answer[g] = i
		}
	}
}

// RescheduleResult is what a change of the prefix code did to a converged
// network (PrefixRescheme).
type RescheduleResult struct {
	// Before and After are the outcomes under the old and the new code.
	Before, After PrefixResult
	// Attached counts the peers that asked a superpeer to take them anew
	// after the change (re-selected: the others only renewed); Moved,
	// those whose superpeer changed.
	Attached, Moved int
	// Members counts the peers whose group (its key and share of the key
	// space) differs between the codes — for exact codes of S and S±1 the
	// members of the one group split or the two merged: the peers a change
	// should touch at most.
	Members int
}

// PrefixRescheme runs the prefix method (every peer's superpeer.PrefixCore,
// as Prefix does) under from until every peer is served, then hands every
// core the code to (PrefixCore.SetScheme, as WithFraction's census does
// when the count changes) and runs for settle more, and reports who
// re-selected and who moved.
func PrefixRescheme(keys []dht.Key, from, to superpeer.Prefix, capacity int, settle time.Duration) (RescheduleResult, error) {
	s, err := newPrefixSim(keys, from, max(0, capacity), defaultAttachTTL)
	if err != nil {
		return RescheduleResult{}, err
	}
	s.loop.RunWhile(prefixLimit, func() bool { return s.unserved > 0 })
	s.res.Seconds = s.loop.Now().Seconds()
	s.result()
	var out RescheduleResult
	out.Before = s.res
	before := append(metrics.Assignment(nil), s.res.Assignment...)
	s.useScheme(to)
	attached := make([]bool, len(keys))
	s.onAttach = func(i int) { attached[i] = true }
	start := s.loop.Now()
	for i, c := range s.cores {
		s.apply(i, c.SetScheme(s.now(), to))
	}
	s.loop.RunUntil(start + settle)
	s.res.Seconds = (s.loop.Now() - start).Seconds()
	s.result()
	out.After = s.res
	for i := range keys {
		if attached[i] {
			out.Attached++
		}
		if before[i] != s.res.Assignment[i] {
			out.Moved++
		}
	}
	for _, k := range keys {
		f, t := from.Group(k), to.Group(k)
		if from.GroupKey(f) != to.GroupKey(t) || from.Share(f) != to.Share(t) {
			out.Members++
		}
	}
	return out, nil
}

func (s *prefixSim) now() time.Time { return epoch0.Add(s.loop.Now()) }

func (s *prefixSim) index(id peer.ID) int {
	i, err := strconv.Atoi(string(id))
	if err != nil || i < 0 || i >= len(s.ids) {
		panic("sim: prefix: no peer " + string(id))
	}
	return i
}

// lookup is the peer a lookup of group g's key answers: the XOR-closest of
// all; for an empty group, some other group's member.
func (s *prefixSim) lookup(g int) int {
	if a := s.answer[g]; a >= 0 {
		return a
	}
	gk, best := s.scheme.GroupKey(g), 0
	for i, k := range s.keys {
		if gk.Closer(k, s.keys[best]) {
			best = i
		}
	}
	s.answer[g] = best
	return best
}

// apply carries out peer i's ops and schedules its next Tick.
func (s *prefixSim) apply(i int, ops []superpeer.PrefixOp) {
	for _, op := range ops {
		switch op.Kind {
		case superpeer.PrefixLookup:
			s.res.Lookups++

			a := s.lookup(op.Group)
			s.loop.After(prefixLookup, func() {
				s.apply(i, s.cores[i].Looked(s.now(), op, s.ids[a], s.keys[a], true))
			})
		case superpeer.PrefixAttach, superpeer.PrefixRenew:
			s.res.Requests++
			if op.Kind == superpeer.PrefixAttach && s.onAttach != nil {
				s.onAttach(i)
			}
			j := s.index(op.Peer)
			s.loop.After(prefixHop, func() {
				st := s.serve(j, i)
				s.loop.After(prefixHop, func() { s.apply(i, s.cores[i].Answered(s.now(), op, st, true)) })
			})
		case superpeer.PrefixLeave:
			j := s.index(op.Peer)
			s.loop.After(prefixHop, func() {
				if t := s.tables[j]; t != nil {
					t.Leave(s.ids[i])
				}
			})
		case superpeer.PrefixDrop:
			s.tables[i] = nil
		}
	}
	role, sp := s.cores[i].Role()
	if served := role == superpeer.Superpeer || (role == superpeer.Client && sp != ""); served != s.served[i] {
		s.served[i] = served
		if served {
			s.unserved--
		} else {
			s.unserved++
		}
	}
	next := s.cores[i].Next()
	if next.IsZero() {
		return
	}
	at := next.Sub(epoch0)
	if w := s.wake[i]; w >= 0 && w <= at {
		return
	}
	s.wake[i] = at
	s.loop.At(at, func() {
		if s.wake[i] != at {
			return // an earlier Tick was scheduled after this one
		}
		s.wake[i] = -1
		s.apply(i, s.cores[i].Tick(s.now()))
	})
}

// serve is peer j's attach server answering client i: its table's decision
// if it is a superpeer, else NOT_SUPERPEER and a recheck, as
// superpeer.Attach does.
func (s *prefixSim) serve(j, i int) superpeer.Status {
	if role, _ := s.cores[j].Role(); role != superpeer.Superpeer {
		s.apply(j, s.cores[j].Recheck(s.now()))
		return superpeer.NotSuperpeer
	}
	if s.tables[j] == nil {
		s.tables[j] = superpeer.NewAttachTable(s.capacity, s.ttl, 0)
	}
	st, _ := s.tables[j].Admit(s.now(), s.ids[i], 0, superpeer.ClientCoord{})
	return st
}

// result reads the peers' roles into s.res.
func (s *prefixSim) result() {
	r := &s.res
	for g := range r.Leader {
		r.Leader[g] = -1
	}
	for i, c := range s.cores {
		role, sp := c.Role()
		g := r.Group[i]
		switch {
		case role == superpeer.Superpeer:
			r.Leader[g] = i
			r.Superpeers = append(r.Superpeers, i)
			r.Assignment[i] = i
		case role == superpeer.Client && sp != "":
			j := s.index(sp)
			r.Assignment[i] = j
			if r.Group[j] != g {
				r.Overflow++
			}
		default:
			r.Assignment[i] = metrics.Unassigned
		}
	}
}

// OccupiedGroups counts the groups at least one key falls in: the number of
// superpeers the prefix method elects among these peers.
func OccupiedGroups(keys []dht.Key, scheme superpeer.Prefix) int {
	seen := make([]bool, scheme.Groups())
	c := 0
	for _, k := range keys {
		if g := scheme.Group(k); !seen[g] {
			seen[g] = true
			c++
		}
	}
	return c
}
