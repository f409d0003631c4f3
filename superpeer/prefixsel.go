package superpeer

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	kb "github.com/libp2p/go-libp2p-kbucket"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/superpeer-overlay/superpeer/dht"
)

// PrefixSelector is the reserved-ID-bits method on one peer. The peer is a
// superpeer iff a DHT lookup of its superpeer key answers with itself; a
// client attaches to the superpeer of its group, or, when that one is full,
// to the superpeer of the nearest group (by XOR of group keys) that accepts.
// The decisions are a PrefixCore's; the selector feeds it from one
// goroutine with the clock, the DHT's lookups and routing-table changes and
// the attach protocol's answers, each lookup and request made beside it.
type PrefixSelector struct {
	node   *dht.Node
	attach *Attach
	core   *PrefixCore // the loop goroutine's alone
	note   notifier

	// scheme is the code in use: fixed, or the census's (box, with
	// WithFraction), which the loop changes.
	mu     sync.Mutex
	scheme Prefix
	box    *censusBox
	census protocol.ID
	rounds uint64 // census rounds, for the choice of partner
	// heard is set once an exchange with another peer has answered: until
	// then every census round asks the nearest routing-table peers again.
	heard atomic.Bool
	// censusEvery is the census period (censusEvery unless a test sets it).
	censusEvery time.Duration
	// settle is how long a superpeer holds its role before it reports
	// (censusTiming.settle; default the attachment TTL).
	settle time.Duration

	// salt is WithSalt's (nil: unsalted), eligible WithIDPuzzle's test of
	// who may be a superpeer (nil: anyone).
	salt     func(now time.Time) [32]byte
	eligible func(peer.ID) bool

	trigger chan struct{}
	lookups atomic.Uint64

	cancel context.CancelFunc
	done   chan struct{}
}

// NewPrefix makes a prefix selector on node; Start runs it. Its attach
// protocol runs under the node's protocol prefix.
func NewPrefix(node *dht.Node, opts ...Option) (*PrefixSelector, error) {
	o, err := applyOptions(opts)
	if err != nil {
		return nil, err
	}
	if o.Superpeers == 0 {
		o.Superpeers = 8
	}
	if o.Fraction > 0 {
		if o.Pow2 {
			return nil, fmt.Errorf("%w: WithFraction needs the exact code, not WithPow2", ErrOption)
		}
		if !o.capacitySet {
			o.Attach.Capacity = 2 * int(math.Ceil(1/o.Fraction))
		}
	}
	var scheme Prefix
	if o.Pow2 {
		scheme, err = Pow2(bitsFor(o.Superpeers))
	} else {
		scheme, err = Exact(o.Superpeers)
	}
	if err != nil {
		return nil, err
	}
	if o.Salt != nil {
		scheme = scheme.Salted(o.Salt(time.Now()))
	}
	switch p := o.Attach.ProtocolPrefix; {
	case p == "":
		o.Attach.ProtocolPrefix = node.ProtocolPrefix()
	case p != node.ProtocolPrefix():
		return nil, fmt.Errorf("%w: attach protocol prefix %q is not the node's %q", ErrOption, p, node.ProtocolPrefix())
	}
	att, err := newAttach(node.Host(), o.Attach)
	if err != nil {
		return nil, err
	}
	o.Attach.TTL = att.TTL()
	core, err := newPrefixCore(node.ID(), node.Key(), scheme, o)
	if err != nil {
		att.Close()
		return nil, err
	}
	s := &PrefixSelector{
		node:    node,
		salt:    o.Salt,
		scheme:  scheme,
		attach:  att,
		core:    core,
		trigger: make(chan struct{}, 1),
	}
	if o.Puzzle > 0 {
		c := o.Puzzle
		s.eligible = func(p peer.ID) bool { return SolvesPuzzle(p, c) }
	}
	att.SetRole(s.note.state)
	att.onRefusedAsNonSuperpeer(s.Recheck)
	if o.Fraction > 0 {
		s.censusEvery = o.census.every
		if s.censusEvery == 0 {
			s.censusEvery = censusEvery
		}
		if s.settle = o.census.settle; s.settle == 0 {
			s.settle = att.TTL()
		}
		if s.box, err = newCensusBox(o.Fraction, node.ID(), scheme.Groups(), att.Capacity(), o.census); err != nil {
			att.Close()
			return nil, fmt.Errorf("%w: %v", ErrOption, err)
		}
		att.census.Store(s.box)
		s.census = censusProtocol(o.Attach.ProtocolPrefix)
		node.Host().SetStreamHandler(s.census, att.handleCensus(s.box))
	}
	return s, nil
}

// Scheme is the grouping in use: with WithFraction, the exact code of the
// superpeer count the peer holds now.
func (s *PrefixSelector) Scheme() Prefix {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.scheme
}

// Attach is the peer's attach protocol (its clients, when a superpeer).
func (s *PrefixSelector) Attach() *Attach { return s.attach }

// Lookups is how many DHT lookups the selector has made.
func (s *PrefixSelector) Lookups() uint64 { return s.lookups.Load() }

// Role is the current role.
func (s *PrefixSelector) Role() Role { r, _ := s.note.state(); return r }

// Superpeer is who serves this peer: itself, the superpeer that accepted
// it, or empty.
func (s *PrefixSelector) Superpeer() peer.ID { _, sp := s.note.state(); return sp }

// Subscribe delivers role and superpeer changes.
func (s *PrefixSelector) Subscribe() (<-chan Change, func()) { return s.note.subscribe() }

// Recheck asks for a lookup soon (rate-limited by MinRecheck).
func (s *PrefixSelector) Recheck() {
	select {
	case s.trigger <- struct{}{}:
	default:
	}
}

// Start runs the selector until Close or ctx ends.
func (s *PrefixSelector) Start(ctx context.Context) error {
	if s.done != nil {
		return errors.New("superpeer: selector already started")
	}
	ctx, s.cancel = context.WithCancel(ctx)
	s.done = make(chan struct{})
	events, stop := s.node.WatchRoutingTable()
	go func() {
		defer close(s.done)
		defer stop()
		s.loop(ctx, events)
	}()
	return nil
}

// loop owns the core: it feeds it the timer, rechecks, routing-table
// changes and the answers of the lookups and requests it asked for, and
// carries out what it asks. Lookups and requests run in goroutines of their
// own and come back as calls to make on the core, so a slow lookup never
// holds up a renewal.
func (s *PrefixSelector) loop(ctx context.Context, events <-chan dht.RoutingEvent) {
	answers := make(chan func(time.Time) []PrefixOp)
	var out sync.WaitGroup
	defer out.Wait() // each returns soon once ctx is done
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var censusTick <-chan time.Time
	var changed <-chan struct{}
	if s.box != nil {
		t := time.NewTicker(s.censusEvery)
		defer t.Stop()
		censusTick, changed = t.C, s.box.changed
	}
	run := func(ops []PrefixOp, now time.Time) {
		for _, op := range ops {
			s.perform(ctx, op, answers, &out)
		}
		role, sp := s.core.Role()
		s.note.set(role, sp, s.core.reason, now)
		if next := s.core.Next(); !next.IsZero() {
			timer.Reset(time.Until(next))
		} else {
			timer.Stop()
		}
	}
	now := time.Now()
	var first []PrefixOp
	if s.box != nil {
		s.askCensus(ctx, censusAsk)
		now = time.Now()
		first = s.takeCensus(now)
	}
	run(append(first, s.core.Tick(now)...), now)
	for {
		var ops []PrefixOp
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
			now = time.Now()
			ops = append(s.resalt(now), s.core.Tick(now)...)
		case <-s.trigger:
			now = time.Now()
			ops = s.core.Recheck(now)
		case ev := <-events:
			now = time.Now()
			ops = s.core.routing(now, ev.Peer, dht.KeyOf(ev.Peer), ev.Added)
		case answer := <-answers:
			now = time.Now()
			ops = answer(now)
		case <-changed:
			now = time.Now()
			ops = s.takeCensus(now)
		case <-censusTick:
			now = time.Now()
			s.censusRound(ctx, now, &out)
		}
		run(ops, now)
	}
}

// perform carries out one op of the core: the lookups and requests in
// goroutines whose answers come back through answers.
func (s *PrefixSelector) perform(ctx context.Context, op PrefixOp, answers chan<- func(time.Time) []PrefixOp, out *sync.WaitGroup) {
	back := func(f func(time.Time) []PrefixOp) {
		select {
		case answers <- f:
		case <-ctx.Done():
		}
	}
	switch op.Kind {
	case PrefixDrop:
		s.attach.DropClients()
	case PrefixLookup:
		s.lookups.Add(1)
		out.Go(func() {
			got, err := s.node.ClosestWhere(ctx, op.Key, 1, s.eligible)
			var id peer.ID
			if ok := err == nil && len(got) > 0; ok {
				id = got[0]
			}
			back(func(now time.Time) []PrefixOp {
				return s.core.Looked(now, op, id, dht.KeyOf(id), id != "")
			})
		})
	case PrefixAttach, PrefixRenew:
		out.Go(func() {
			ans, err := s.attach.Request(ctx, op.Peer, false, nil, 0)
			back(func(now time.Time) []PrefixOp { return s.core.Answered(now, op, ans.Status, err == nil) })
		})
	case PrefixLeave:
		out.Go(func() { _, _ = s.attach.Request(ctx, op.Peer, true, nil, 0) })
	}
}

// takeCensus makes the census's count the code in use (the loop's).
func (s *PrefixSelector) takeCensus(now time.Time) []PrefixOp {
	scheme, err := Exact(s.box.value().S)
	if err != nil {
		return nil
	}
	s.mu.Lock()
	scheme = scheme.withSaltOf(s.scheme)
	same := scheme == s.scheme
	s.scheme = scheme
	s.mu.Unlock()
	if same {
		return nil
	}
	return s.core.SetScheme(now, scheme)
}

// resalt makes WithSalt's value for now the code's salt (the loop's): a
// new salt moves every group key, and the core re-selects.
func (s *PrefixSelector) resalt(now time.Time) []PrefixOp {
	if s.salt == nil {
		return nil
	}
	salt := s.salt(now)
	s.mu.Lock()
	old, _ := s.scheme.Salt()
	scheme := s.scheme.Salted(salt)
	s.scheme = scheme
	s.mu.Unlock()
	if salt == old {
		return nil
	}
	return s.core.SetScheme(now, scheme)
}

// censusAsk is how many routing-table peers a starting peer asks for the
// count they hold.
const censusAsk = 3

// askCensus asks the peer's k nearest routing-table peers for the count
// they hold (a census exchange; a peer that is no superpeer answers with
// its value), before the first step and then every census round until one
// has answered: a peer joining a network that has grown starts from the
// network's code, not from its own initial one — without this every joiner
// took the initial S (1 in a network started small) and they all asked the
// one superpeer of that code's only group, which is the one place the count
// would reach them from.
func (s *PrefixSelector) askCensus(ctx context.Context, k int) {
	peers := s.node.RoutingTable().NearestPeers(kb.ConvertPeerID(s.node.ID()), k)
	var wg sync.WaitGroup
	for _, p := range peers {
		wg.Go(func() {
			if s.attach.exchangeCensus(ctx, s.census, p, s.box) == nil {
				s.heard.Store(true)
			}
		})
	}
	wg.Wait()
}

// censusRound is a census period (the loop's): a superpeer reports its
// load and group share, exchanges its table with the superpeer of another
// group, and proposes a new count if its table calls for one; any other
// peer withdraws its report.
func (s *PrefixSelector) censusRound(ctx context.Context, now time.Time, out *sync.WaitGroup) {
	scheme := s.Scheme()
	role, _ := s.core.Role()
	b := s.box
	b.mu.Lock()
	if s.core.settled(now, s.settle) {
		b.c.Report(now, s.attach.Load()+1, scheme.Share(scheme.Group(s.node.Key())))
	} else {
		// Not a superpeer, or not one for an attachment TTL under this
		// code: its group's members may still be attached elsewhere (to
		// a dead superpeer, or under the code before), and a load that
		// misses them counts the network short — short enough to propose
		// a smaller S, whose re-attachments count it shorter still (a
		// live shrink 1000 → 500 went down to S = 1 that way).
		b.c.Withdraw()
	}
	_, proposed := b.c.Tick(now)
	b.mu.Unlock()
	if proposed {
		b.signal()
	}
	if !s.heard.Load() {
		out.Go(func() { s.askCensus(ctx, 1) })
	}
	if role != Superpeer || scheme.Groups() < 2 {
		return
	}
	// Another group, spread by the peer's key and the round.
	s.rounds++
	self := s.node.Key()
	own := scheme.Group(self)
	g := int(splitmix(binary.BigEndian.Uint64(self[:8])+s.rounds) % uint64(scheme.Groups()-1))
	if g >= own {
		g++
	}
	key := scheme.GroupKey(g)
	s.lookups.Add(1)
	out.Go(func() {
		got, err := s.node.ClosestWhere(ctx, key, 1, s.eligible)
		if err != nil || len(got) == 0 || got[0] == s.node.ID() {
			return
		}
		_ = s.attach.exchangeCensus(ctx, s.census, got[0], b)
	})
}

// Close stops the selector and the attach protocol.
func (s *PrefixSelector) Close() error {
	if s.cancel != nil {
		s.cancel()
		<-s.done
	}
	if s.box != nil {
		s.node.Host().RemoveStreamHandler(s.census)
	}
	s.attach.Close()
	return nil
}

var _ Selector = (*PrefixSelector)(nil)
