package superpeer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/superpeer-overlay/superpeer/dht"
)

// PrefixCore is the prefix method on one peer as a pure state machine: the
// decisions of PrefixSelector without its network. It does no I/O, starts
// no goroutine and reads no clock: time comes in with every call, lookup
// results and attach answers come in as arguments, and what the peer must
// do leaves as PrefixOps. PrefixSelector runs one over the DHT and the
// attach protocol; the simulator (experiments/sim) runs one per peer on
// virtual time. A PrefixCore is not safe for concurrent use.
//
// The peer steps: it looks up the peer XOR-closest to its group key. If
// the answer is itself it is a superpeer; otherwise it attaches to the
// answer, and if that one is full (and nobody serves it yet) it walks the
// other groups' superpeers by Prefix.GroupsByDistance, fallbackGroups
// groups a step, the next step going on where the last stopped. A
// superpeer that answers NOT_SUPERPEER (it has not learned its role yet) is
// asked again, without a lookup, after 1, 2, 4, … × MinRecheck (at most
// Recheck) until a step names another; so is one whose request got no
// answer, up to homeFailTries in a row before a step walks.
//
// Steps come within StartSpread of the first call (spread by key), then
// every Recheck (ClientRecheck for a client attached in its group; backing
// off to it for a peer left unserved), on Recheck
// and on a routing-table change that can matter, never two within
// MinRecheck. The attachment is renewed every TTL/3; a refused renewal, or
// failed ones until the TTL since the last accepted one would pass before
// the next, ends it and brings a step within StartSpread.
//
// One step or one retry is under way at a time: calls that come meanwhile
// are remembered (a Recheck) or queued (routing-table changes, judged
// against what the step decided). Renewals go on beside them.
type PrefixCore struct {
	id     peer.ID
	key    dht.Key
	scheme Prefix
	group  int
	// next is a code SetScheme gave while a step was under way, taken up
	// when the step ends; roleScheme the code under which the step that
	// made the peer a superpeer decided it, roleSince when it became one
	// under that code.
	next       *Prefix
	roleScheme Prefix
	roleSince  time.Time
	// The periods, the options' with their defaults.
	recheck, clientRecheck, minRecheck, startSpread, renewEvery time.Duration

	started bool
	t0      time.Time // the first call: the renewal ticker's origin
	seq     uint64    // of the last op

	// What Role reports, and why (the adapter's Change.Reason).
	role       Role
	serving    peer.ID
	servingKey dht.Key
	reason     string

	attached    peer.ID // the superpeer that accepted us, as a client
	attachedKey dht.Key
	home        bool // attached is our own group's superpeer
	// homeFails counts the requests in a row to homeFailed, our group's
	// superpeer, that got no answer.
	homeFailed peer.ID
	homeFails  int
	// named is the superpeer of our group that our last lookup named.
	named    peer.ID
	namedKey dht.Key
	// pending is the superpeer our last lookup named that answered
	// NOT_SUPERPEER (it had not learned its role yet), how often, and when
	// to ask it again.
	pending      peer.ID
	pendingKey   dht.Key
	pendingTries int
	retryAt      time.Time
	// misses counts steps in a row that left us neither superpeer nor
	// attached at home; the periodic step backs off with it.
	misses int
	// fallbackFrom is where in GroupsByDistance the next fallback walk
	// starts: each step tries fallbackGroups groups, the next step the
	// following ones, back to the nearest once the walk has gone round.
	fallbackFrom int
	steps        uint64

	phase    phase
	await    uint64     // the op the phase waits for
	step     *stepState // the step or retry under way
	lastStep time.Time  // when the last step began (zero: none yet)
	stepAt   time.Time  // phaseWait: when the step begins
	nextAt   time.Time  // the periodic step
	again    bool       // a Recheck came while busy: step once more after
	queued   []routingEvent

	renewSeq  uint64    // the renewal in flight, 0 if none
	renewTick int64     // the last renewal tick passed: t0 + renewTick·renewEvery
	servedAt  time.Time // when the superpeer serving us last accepted us
	lostAt    time.Time // when to step if a lost attachment is not replaced

	ops []PrefixOp
}

// phase is what the one step-or-retry slot of a PrefixCore is doing.
type phase uint8

const (
	phaseIdle      phase = iota
	phaseWait            // a step is due at stepAt, MinRecheck after the last
	phaseLookHome        // the step looks up our group key
	phaseAskHome         // the step asks our group's superpeer
	phaseLookOther       // the fallback walk looks up another group's key
	phaseAskOther        // the fallback walk asks that group's superpeer
	phaseRetry           // asking the pending superpeer again
)

// stepState is what a step (or a retry) carries between its lookups and
// requests.
type stepState struct {
	sp        peer.ID // our group's superpeer as this step's lookup named it
	current   peer.ID // who served us when that lookup came back
	target    peer.ID // the superpeer asked now
	targetKey dht.Key
	walk      []int // GroupsByDistance(group), once the walk begins
	at, end   int   // the walk's next index and where this step stops
}

// routingEvent is a routing-table change queued while a step is under way.
type routingEvent struct {
	id    peer.ID
	key   dht.Key
	added bool
}

// maxQueued bounds the routing-table changes kept while a step is under way
// (the DHT's own watch channel holds as many; it drops the rest too).
const maxQueued = 64

// fallbackGroups is how many other groups one step asks when our own
// superpeer cannot take us.
const fallbackGroups = 3

// defaultAttachTTL is NewAttach's default TTL.
const defaultAttachTTL = 30 * time.Second

// PrefixOpKind names what a PrefixOp asks for.
type PrefixOpKind uint8

const (
	// PrefixLookup looks up the live peer XOR-closest to the group key of
	// Group (Prefix.GroupKey); the answer goes to Looked.
	PrefixLookup PrefixOpKind = iota + 1
	// PrefixAttach asks Peer to serve this peer (an attach request); the
	// answer goes to Answered.
	PrefixAttach
	// PrefixRenew renews the attachment at Peer (the same request, every
	// TTL/3); the answer goes to Answered.
	PrefixRenew
	// PrefixLeave tells Peer that this peer leaves it; nothing is answered.
	PrefixLeave
	// PrefixDrop forgets every client this peer serves: it is no superpeer
	// any more.
	PrefixDrop
)

func (k PrefixOpKind) String() string {
	switch k {
	case PrefixLookup:
		return "lookup"
	case PrefixAttach:
		return "attach"
	case PrefixRenew:
		return "renew"
	case PrefixLeave:
		return "leave"
	case PrefixDrop:
		return "drop"
	}
	return fmt.Sprintf("PrefixOpKind(%d)", uint8(k))
}

// PrefixOp is one thing a PrefixCore asks its adapter to do. Answers name
// the op they answer: pass it back as it came.
type PrefixOp struct {
	Kind PrefixOpKind
	// Group and Key are the group whose key to look up and that key, under
	// the code the core held when it asked (PrefixLookup).
	Group int
	Key   dht.Key
	Peer  peer.ID // PrefixAttach, PrefixRenew, PrefixLeave
	seq   uint64
}

// NewPrefixCore is the prefix method's state machine for the peer id with
// kad key key (dht.KeyOf(id)) under scheme. Of the options it takes the
// recheck periods and the attach TTL, with NewPrefix's defaults; S and
// WithPow2 are the scheme's business.
func NewPrefixCore(id peer.ID, key dht.Key, scheme Prefix, opts ...Option) (*PrefixCore, error) {
	o, err := applyOptions(opts)
	if err != nil {
		return nil, err
	}
	return newPrefixCore(id, key, scheme, o)
}

func newPrefixCore(id peer.ID, key dht.Key, scheme Prefix, opts options) (*PrefixCore, error) {
	if id == "" {
		return nil, errors.New("superpeer: empty peer ID")
	}
	opts = opts.periods()
	return &PrefixCore{
		id: id, key: key, scheme: scheme, group: scheme.Group(key),
		recheck: opts.Recheck, clientRecheck: opts.ClientRecheck, minRecheck: opts.MinRecheck,
		startSpread: opts.StartSpread, renewEvery: opts.Attach.TTL / 3,
	}, nil
}

// periods applies the defaults of the selector's periods.
func (o options) periods() options {
	if o.MinRecheck == 0 {
		o.MinRecheck = 500 * time.Millisecond
	}
	if o.Attach.TTL == 0 {
		o.Attach.TTL = defaultAttachTTL
	}
	if o.Recheck == 0 {
		o.Recheck = o.Attach.TTL
	}
	if o.ClientRecheck == 0 {
		o.ClientRecheck = 8 * o.Recheck
	}
	if o.StartSpread == 0 {
		o.StartSpread = 2 * o.MinRecheck
	}
	return o
}

// Role is the peer's role and who serves it: itself as a superpeer, the
// superpeer that accepted it as a client, or empty.
func (c *PrefixCore) Role() (Role, peer.ID) { return c.role, c.serving }

// settled reports whether the peer has been the superpeer of its group
// under the code in use for at least d: long enough, with d an attachment
// TTL, for every live member of the group to have renewed or re-attached
// to it, so that its load counts the group (the census's report).
func (c *PrefixCore) settled(now time.Time, d time.Duration) bool {
	return c.role == Superpeer && c.roleScheme == c.scheme && now.Sub(c.roleSince) >= d
}

// Next is when Tick is due next (zero: nothing is timed).
func (c *PrefixCore) Next() time.Time {
	var t time.Time
	at := func(x time.Time) {
		if !x.IsZero() && (t.IsZero() || x.Before(t)) {
			t = x
		}
	}
	switch c.phase {
	case phaseIdle:
		at(c.nextAt)
		at(c.retryAt)
	case phaseWait:
		at(c.stepAt)
	}
	if c.attached != "" && c.renewSeq == 0 {
		at(c.t0.Add(time.Duration(c.renewTick+1) * c.renewEvery))
	}
	at(c.lostAt)
	return t
}

// Tick runs what is due at now: the periodic step, a step held back by
// MinRecheck, a retry, a renewal, the step after a lost attachment. The
// first call of any method starts the core's clocks.
func (c *PrefixCore) Tick(now time.Time) []PrefixOp {
	c.begin(now)
	if c.attached != "" && c.renewSeq == 0 {
		if k := int64(now.Sub(c.t0) / c.renewEvery); k > c.renewTick {
			// Ticks missed while a renewal was out are dropped, as a
			// time.Ticker drops them.
			c.renewTick = k
			c.renewSeq = c.emit(PrefixRenew, 0, c.attached).seq
		}
	}
	if !c.lostAt.IsZero() && !now.Before(c.lostAt) {
		c.lostAt = time.Time{}
		if c.attached == "" {
			c.wantStep(now)
		}
	}
	if c.phase == phaseWait && !now.Before(c.stepAt) {
		c.startStep(now)
	}
	c.resume(now)
	return c.take()
}

// Recheck asks for a step soon: at once, or MinRecheck after the last, or
// after the step or retry under way.
func (c *PrefixCore) Recheck(now time.Time) []PrefixOp {
	c.begin(now)
	c.wantStep(now)
	return c.take()
}

// Looked is the answer to op, a PrefixLookup: the live peer XOR-closest to
// the group key is id, whose kad key is key; ok false if the lookup failed.
// An answer to an op the core no longer waits for is ignored.
func (c *PrefixCore) Looked(now time.Time, op PrefixOp, id peer.ID, key dht.Key, ok bool) []PrefixOp {
	c.begin(now)
	if op.Kind == PrefixLookup && op.seq == c.await && op.seq != 0 {
		c.await = 0
		switch c.phase {
		case phaseLookHome:
			c.lookedHome(now, id, key, ok)
		case phaseLookOther:
			c.lookedOther(now, op.Group, id, key, ok)
		}
	}
	return c.take()
}

// Answered is the answer to op, a PrefixAttach or PrefixRenew: the attach
// protocol's status, ok false if the request failed (no answer). An answer
// to an op the core no longer waits for is ignored.
func (c *PrefixCore) Answered(now time.Time, op PrefixOp, st Status, ok bool) []PrefixOp {
	c.begin(now)
	switch {
	case op.seq == 0:
	case op.Kind == PrefixRenew && op.seq == c.renewSeq:
		c.renewed(now, op.Peer, st, ok)
	case op.Kind == PrefixAttach && op.seq == c.await:
		c.await = 0
		switch c.phase {
		case phaseAskHome:
			c.askedHome(now, st, ok)
		case phaseAskOther:
			c.askedOther(now, st, ok)
		case phaseRetry:
			s := c.step
			c.answered(now, s.target, s.targetKey, true, st, ok, "superpeer of its group")
			c.step, c.phase = nil, phaseIdle
			c.resume(now)
		}
	}
	return c.take()
}

// routing is a routing-table change: peer id (kad key key) added to the
// table or removed from it. One that can change who serves us brings a
// step; while a step is under way it waits, to be judged against what the
// step decides.
func (c *PrefixCore) routing(now time.Time, id peer.ID, key dht.Key, added bool) []PrefixOp {
	c.begin(now)
	ev := routingEvent{id: id, key: key, added: added}
	switch {
	case c.phase != phaseIdle:
		if len(c.queued) < maxQueued {
			c.queued = append(c.queued, ev)
		}
	case c.relevant(ev):
		c.wait(now)
	}
	return c.take()
}

// relevant says whether a routing-table change can change who serves us:
// a peer added closer to our group key than our superpeer (or than us, when
// we are the superpeer; any peer of our group, when a step has named none),
// or our superpeer gone. Everything else is noise: in a large group every lookup
// puts its asker into the tables of the peers near the group key, and
// rechecking on each of those events makes lookups beget lookups.
func (c *PrefixCore) relevant(ev routingEvent) bool {
	if !ev.added {
		return ev.id == c.serving
	}
	if c.scheme.Group(ev.key) != c.group {
		return false
	}
	ref, refKey := c.serving, c.servingKey
	if c.role == Client && (ref == "" || !c.home) {
		// Not served at home: the reference is the superpeer our last
		// lookup named (it may not have learned its role yet). Every
		// event of the group counted here before, and in a group of
		// hundreds the unserved clients looked up on each other's
		// arrivals every MinRecheck.
		ref, refKey = c.named, c.namedKey
	}
	if ref == "" {
		// Nobody named yet: any peer of the group may be the one, once a
		// step has looked. Before the first step, the step due within
		// StartSpread will see the table as it is then. Taken as a cue,
		// every early lookup, which puts its asker into tables of its
		// group, could start those peers' first steps at once, and the
		// spread did not hold (at 10 000 peers the selection never
		// converged; with this, the lookups came at the spread's rate).
		return c.steps > 0
	}
	return c.scheme.GroupKey(c.group).Closer(ev.key, refKey)
}

func (c *PrefixCore) begin(now time.Time) {
	if c.started {
		return
	}
	c.started, c.t0 = true, now
	// The first step comes within StartSpread, spread by the peer's key: a
	// thousand peers started together do not all look up at once.
	first := time.Duration(binary.BigEndian.Uint64(c.key[24:]) % uint64(c.startSpread+1))
	c.nextAt = now.Add(first)
}

func (c *PrefixCore) emit(k PrefixOpKind, g int, p peer.ID) PrefixOp {
	c.seq++
	op := PrefixOp{Kind: k, Group: g, Peer: p, seq: c.seq}
	if k == PrefixLookup {
		op.Key = c.scheme.GroupKey(g)
	}
	c.ops = append(c.ops, op)
	return op
}

func (c *PrefixCore) take() []PrefixOp {
	ops := c.ops
	c.ops = nil
	return ops
}

func (c *PrefixCore) set(r Role, sp peer.ID, key dht.Key, reason string) {
	c.role, c.serving, c.servingKey, c.reason = r, sp, key, reason
}

// wantStep asks for a step: now, after MinRecheck, or after the step or
// retry under way.
func (c *PrefixCore) wantStep(now time.Time) {
	if c.phase != phaseIdle {
		c.again = true
		return
	}
	c.wait(now)
}

// wait starts a step now, or holds it until MinRecheck after the last.
func (c *PrefixCore) wait(now time.Time) {
	c.phase, c.stepAt = phaseWait, now
	if !c.lastStep.IsZero() {
		if t := c.lastStep.Add(c.minRecheck); t.After(now) {
			c.stepAt = t
		}
	}
	if !now.Before(c.stepAt) {
		c.startStep(now)
	}
}

// SetScheme changes the prefix code, as a changed superpeer count does
// (the exact codes of S and S±1 differ in one group; WithFraction's census
// calls it). If the peer's group key changes with it, a step follows, as
// after a Recheck; a step under way finishes under the old code first.
func (c *PrefixCore) SetScheme(now time.Time, scheme Prefix) []PrefixOp {
	c.begin(now)
	if scheme == c.scheme && c.next == nil {
		return nil
	}
	c.next = &scheme
	if c.phase == phaseWait {
		// The step has not begun: it can begin under the new code.
		c.phase = phaseIdle
		c.again = true
	}
	c.resume(now)
	return c.take()
}

// takeScheme makes a code given to SetScheme current, between steps.
func (c *PrefixCore) takeScheme(now time.Time) {
	old := c.scheme.GroupKey(c.group)
	c.scheme, c.next = *c.next, nil
	c.group = c.scheme.Group(c.key)
	c.fallbackFrom = 0
	if c.scheme.GroupKey(c.group) != old {
		c.home = false
		c.again = true
	}
}

// resume takes up what came while the slot was busy, and what is due.
func (c *PrefixCore) resume(now time.Time) {
	if c.phase == phaseIdle && c.next != nil {
		c.takeScheme(now)
	}
	for c.phase == phaseIdle {
		switch {
		case c.again:
			c.again = false
			c.wait(now)
		case len(c.queued) > 0:
			ev := c.queued[0]
			if c.queued = c.queued[1:]; len(c.queued) == 0 {
				c.queued = nil
			}
			if c.relevant(ev) {
				c.wait(now)
			}
		case !now.Before(c.nextAt):
			c.wait(now)
		case !c.retryAt.IsZero() && !now.Before(c.retryAt):
			c.retryAt = time.Time{}
			c.retry()
		default:
			return
		}
	}
}

// startStep decides the role with one lookup and moves the attachment when
// the lookup says another superpeer should serve us. Renewals go on beside.
func (c *PrefixCore) startStep(now time.Time) {
	c.steps++
	c.lastStep = now
	c.pending, c.pendingTries, c.retryAt = "", 0, time.Time{}
	c.step = &stepState{}
	c.phase = phaseLookHome
	c.await = c.emit(PrefixLookup, c.group, "").seq
}

func (c *PrefixCore) lookedHome(now time.Time, sp peer.ID, key dht.Key, ok bool) {
	if !ok {
		c.endStep(now) // keep the state; the next step tries again
		return
	}
	if c.attached != "" && c.home && c.scheme.GroupKey(c.group).Closer(c.attachedKey, key) {
		// The superpeer serving us is alive (failed renewals drop it)
		// and closer to our group key than the answer: the lookup missed
		// it (a request that failed on a loaded network). A lookup cannot
		// un-know a live peer, so we stay.
		sp, key = c.attached, c.attachedKey
	}
	c.named, c.namedKey = sp, key
	s := c.step
	s.sp = sp
	if sp == c.id {
		if c.attached != "" {
			c.emit(PrefixLeave, 0, c.attached)
			c.attached = ""
		}
		if c.role != Superpeer || c.roleScheme != c.scheme {
			c.roleSince = now
		}
		c.set(Superpeer, c.id, c.key, "closest to its superpeer key")
		c.roleScheme = c.scheme
		c.endStep(now)
		return
	}
	if c.role == Superpeer {
		// Demoted: no longer a superpeer, whether or not the new one
		// takes us in at once (it may not know its role yet).
		c.emit(PrefixDrop, 0, "")
		c.set(Client, "", dht.Key{}, "another peer is closer to its superpeer key")
	}
	s.current = c.attached
	if s.current == sp {
		c.set(Client, sp, key, "superpeer of its group")
		c.endStep(now)
		return
	}
	// Our group's superpeer first; if it is full, keep the one that serves
	// us now, or find the nearest group's superpeer that accepts.
	s.target, s.targetKey = sp, key
	c.ask(phaseAskHome, sp)
}

func (c *PrefixCore) askedHome(now time.Time, st Status, ok bool) {
	s := c.step
	if c.answered(now, s.target, s.targetKey, true, st, ok, "superpeer of its group") {
		c.endStep(now)
		return
	}
	if s.current != "" || c.pending == s.sp {
		// Served already, or our superpeer has not learned its role yet
		// (a retry asks it again): only a full one sends us elsewhere.
		// Falling back here made every client of a starting swarm look up
		// every group's key while no superpeer knew its role yet.
		c.endStep(now)
		return
	}
	// A few groups per step, the nearest first: each costs a lookup, and
	// walking every group at once made each unserved client of a swarm
	// whose superpeers had not yet learned their roles look up every group
	// key (S lookups) in one step. Later steps go on from there, so every
	// group is tried while the client stays unserved.
	s.walk = c.scheme.GroupsByDistance(c.group)
	from := c.fallbackFrom % max(1, len(s.walk))
	c.fallbackFrom = from + fallbackGroups
	s.at, s.end = from, min(from+fallbackGroups, len(s.walk))
	c.walkOn(now)
}

// walkOn looks up the next group of the fallback walk, or ends the step.
func (c *PrefixCore) walkOn(now time.Time) {
	s := c.step
	if s.at >= s.end {
		c.set(Client, "", dht.Key{}, "no superpeer accepted")
		c.endStep(now)
		return
	}
	c.phase = phaseLookOther
	c.await = c.emit(PrefixLookup, s.walk[s.at], "").seq
}

func (c *PrefixCore) lookedOther(now time.Time, g int, id peer.ID, key dht.Key, ok bool) {
	s := c.step
	// An empty group has no superpeer: its key's closest peer is another
	// group's.
	if !ok || c.scheme.Group(key) != g || id == s.sp || id == c.id {
		s.at++
		c.walkOn(now)
		return
	}
	s.target, s.targetKey = id, key
	c.ask(phaseAskOther, id)
}

func (c *PrefixCore) askedOther(now time.Time, st Status, ok bool) {
	s := c.step
	if ok && st == Accepted {
		c.accept(now, s.target, s.targetKey, false, fmt.Sprintf("own superpeer full; group %d's accepted", s.walk[s.at]))
		c.fallbackFrom = 0
		c.endStep(now)
		return
	}
	s.at++
	c.walkOn(now)
}

func (c *PrefixCore) ask(p phase, sp peer.ID) {
	c.phase = p
	c.await = c.emit(PrefixAttach, 0, sp).seq
}

// answered takes our group's superpeer's answer (home) or another's; it
// reports whether sp accepted us.
func (c *PrefixCore) answered(now time.Time, sp peer.ID, key dht.Key, home bool, st Status, ok bool, reason string) bool {
	if ok && st == Accepted {
		c.accept(now, sp, key, home, reason)
		return true
	}
	if !home {
		return false
	}
	if ok || c.homeFailed != sp {
		c.homeFailed, c.homeFails = "", 0
	}
	switch {
	case ok && st == NotSuperpeer:
		c.notYet(now, sp, key)
	case !ok:
		// No answer: on a loaded network a request times out while the
		// superpeer lives and has room, and walking to other groups on it
		// cost each such client a lookup a group and left it served away
		// until its next step (at 10 000 peers, the last clients to
		// converge). Ask it again as one that has not learned its role;
		// after homeFailTries in a row without an answer, walk.
		c.homeFailed = sp
		if c.homeFails++; c.homeFails < homeFailTries {
			c.notYet(now, sp, key)
		} else {
			c.pending, c.pendingTries, c.retryAt = "", 0, time.Time{}
		}
	}
	return false
}

// homeFailTries is how many requests in a row to our group's superpeer may
// fail (no answer) before a step walks to other groups.
const homeFailTries = 3

// accept records sp as the superpeer serving us and leaves the one before.
func (c *PrefixCore) accept(now time.Time, sp peer.ID, key dht.Key, home bool, reason string) {
	old := c.attached
	if old == "" {
		// The renewal ticker ran on while nobody served us: the first
		// renewal is at its next tick.
		c.renewTick = int64(now.Sub(c.t0) / c.renewEvery)
	}
	c.attached, c.attachedKey, c.home, c.servedAt = sp, key, home, now
	if home {
		// A fallback keeps the pending retry: we move home once our own
		// superpeer knows its role.
		c.pending, c.pendingTries, c.retryAt = "", 0, time.Time{}
	}
	if old != "" && old != sp {
		c.emit(PrefixLeave, 0, old)
	}
	c.set(Client, sp, key, reason)
}

// notYet handles our group's superpeer refusing us because it has not
// learned its role yet (our refusal prompts it to look up). The lookup that
// named it is fresh, so we ask it again, without a lookup, after 1, 2, 4, …
// × MinRecheck (at most Recheck), until it accepts or our next step names
// another. Looking up again instead made the hundreds of clients of a new
// superpeer swamp the peers near their group key.
func (c *PrefixCore) notYet(now time.Time, sp peer.ID, key dht.Key) {
	if c.pending != sp {
		c.pending, c.pendingKey, c.pendingTries = sp, key, 0
	}
	c.pendingTries++
	c.retryAt = now.Add(min(c.recheck, c.minRecheck<<min(c.pendingTries-1, 16)))
}

// retry asks the pending superpeer again, unless a step or an accepted
// attach has settled things since.
func (c *PrefixCore) retry() {
	sp := c.pending
	if sp == "" || c.attached == sp || c.role == Superpeer {
		return
	}
	c.step = &stepState{target: sp, targetKey: c.pendingKey}
	c.ask(phaseRetry, sp)
}

// renewed takes a renewal's answer. A refusal ends the attachment; so
// does a failed renewal (no answer) unless the next renewal is due before
// the superpeer lets the attachment lapse (the TTL since it last accepted
// us): one renewal lost on a loaded network is not the superpeer's death,
// and ending the attachment on it sends the superpeer's clients back to
// their lookups together.
func (c *PrefixCore) renewed(now time.Time, sp peer.ID, st Status, ok bool) {
	c.renewSeq = 0
	if c.attached != sp {
		return
	}
	if ok && st == Accepted {
		c.servedAt = now
		return
	}
	next := c.t0.Add(time.Duration(int64(now.Sub(c.t0)/c.renewEvery)+1) * c.renewEvery)
	if !ok && next.Before(c.servedAt.Add(3*c.renewEvery)) {
		return
	}
	c.attached = ""
	c.set(Client, "", dht.Key{}, "superpeer stopped serving")
	// All the clients of a superpeer that fails notice within two renewals
	// of each other (the TTL); their lookups of the group key are spread over
	// StartSpread so they do not arrive as one burst. Renewals go on
	// meanwhile: a step may attach us elsewhere before then.
	x := splitmix(binary.BigEndian.Uint64(c.key[8:]) + c.steps)
	c.lostAt = now.Add(time.Duration(x % uint64(c.startSpread+1)))
}

// endStep closes a step: the backoff counter and the next periodic step.
func (c *PrefixCore) endStep(now time.Time) {
	if c.role == Superpeer || (c.attached != "" && c.home) {
		c.misses = 0
	} else {
		c.misses++
	}
	c.step, c.phase = nil, phaseIdle
	c.nextAt = now.Add(c.nextRecheck())
	c.resume(now)
}

// nextRecheck is the time to the next periodic step: Recheck for a
// superpeer, an unattached peer or a client served away from its group
// (which moves home as soon as its own superpeer has room), ClientRecheck
// for a client attached at home, either varied by ±20% (derived from the
// key and the step count, so runs repeat) so that peers started together
// drift apart.
func (c *PrefixCore) nextRecheck() time.Duration {
	d := c.recheck
	if c.role == Client && c.attached != "" && c.home {
		d = c.clientRecheck
	} else if c.misses > 1 && c.attached == "" {
		// Unserved after steps in a row: back off (2, 4, … × Recheck, at
		// most ClientRecheck) so that a crowd of peers that cannot be
		// served yet does not swamp the peers near its group key with
		// lookups. A client served away from home does not back off: it
		// is one of the few its full superpeer turned away, and once its
		// superpeer has room it should move home within a Recheck (at
		// 10 000 peers one client, away after a crowded start, was still
		// away 80 s after every other had converged).
		d = min(c.clientRecheck, c.recheck<<min(c.misses-1, 16))
	}
	x := splitmix(binary.BigEndian.Uint64(c.key[16:]) + c.steps)
	f := 0.8 + 0.4*float64(x>>11)/(1<<53)
	return time.Duration(float64(d) * f)
}

// splitmix is SplitMix64's output function: a well-mixed 64-bit value.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
