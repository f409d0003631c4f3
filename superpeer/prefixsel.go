package superpeer

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/superpeer-overlay/superpeer/dht"
)

// PrefixOptions configure the prefix selector.
type PrefixOptions struct {
	// Superpeers is S, the number of superpeers wanted (default 8).
	Superpeers int
	// Pow2 uses the seed's 2^⌈log2 S⌉ groups instead of exactly S.
	Pow2 bool
	// Recheck is how often a peer looks its superpeer key up again (default
	// the attach TTL). Attachments are renewed every TTL/3 apart from this;
	// a failed renewal, a refusal and a routing-table change in the peer's
	// group each bring a lookup forward.
	Recheck time.Duration
	// ClientRecheck is how often a client that is attached looks its
	// superpeer key up again (default 8 × Recheck). Superpeers and
	// unattached peers recheck every Recheck. A client needs few lookups of
	// its own: its superpeer's failure shows as a failed renewal, and a
	// superpeer that is overtaken by a closer peer learns it from its
	// routing table and refuses the next renewal, which brings the client's
	// lookup forward. This is what keeps the lookup load of a swarm of
	// thousands of peers small (n / (8·Recheck) lookups per second).
	ClientRecheck time.Duration
	// MinRecheck spaces rechecks triggered by routing-table changes and
	// refusals (default 500 ms), so a burst of joins costs one lookup.
	MinRecheck time.Duration
	// StartSpread spreads the first lookups of peers started together over
	// this window, by peer key (default 2 × MinRecheck), and likewise the
	// lookups of the clients of a superpeer that failed. A swarm of n peers
	// on one machine sets it in proportion to n.
	StartSpread time.Duration
	// Attach configures the attach protocol (capacity C, TTL).
	Attach AttachOptions
}

// PrefixSelector is the reserved-ID-bits method on one peer. The peer is a
// superpeer iff a DHT lookup of its superpeer key answers with itself; a
// client attaches to the superpeer of its group, or, when that one is full,
// to the superpeer of the nearest group (by XOR of group keys) that accepts.
type PrefixSelector struct {
	node   *dht.Node
	scheme Prefix
	opts   PrefixOptions
	attach *Attach
	note   notifier

	group   int
	trigger chan struct{}
	retry   chan struct{} // retry the pending attach without a lookup
	lookups atomic.Uint64
	steps   atomic.Uint64

	mu       sync.Mutex
	attached peer.ID // the superpeer that accepted us, as a client
	home     bool    // attached is our own group's superpeer
	// pending is the superpeer our last lookup named that answered
	// NOT_SUPERPEER (it had not learned its role yet), and how often.
	pending      peer.ID
	pendingTries int
	// misses counts steps in a row that left us neither superpeer nor
	// attached at home; the periodic lookup backs off with it.
	misses int
	// named is the superpeer of our group that our last lookup named.
	named peer.ID
	// fallbackFrom is where in GroupsByDistance the next fallback walk
	// starts: each step tries fallbackGroups groups, the next step the
	// following ones, back to the nearest once the walk has gone round.
	fallbackFrom int

	cancel context.CancelFunc
	done   chan struct{}
}

// NewPrefix makes a prefix selector on node; Start runs it.
func NewPrefix(node *dht.Node, opts PrefixOptions) (*PrefixSelector, error) {
	if opts.Superpeers == 0 {
		opts.Superpeers = 8
	}
	var scheme Prefix
	var err error
	if opts.Pow2 {
		scheme, err = Pow2(BitsFor(opts.Superpeers))
	} else {
		scheme, err = Exact(opts.Superpeers)
	}
	if err != nil {
		return nil, err
	}
	if opts.MinRecheck == 0 {
		opts.MinRecheck = 500 * time.Millisecond
	}
	att, err := NewAttach(node.Host(), opts.Attach)
	if err != nil {
		return nil, err
	}
	if opts.Recheck == 0 {
		opts.Recheck = att.TTL()
	}
	if opts.ClientRecheck == 0 {
		opts.ClientRecheck = 8 * opts.Recheck
	}
	if opts.StartSpread == 0 {
		opts.StartSpread = 2 * opts.MinRecheck
	}
	if opts.Recheck <= 0 || opts.ClientRecheck <= 0 || opts.MinRecheck < 0 || opts.StartSpread < 0 {
		att.Close()
		return nil, fmt.Errorf("superpeer: recheck %v, client recheck %v, min recheck %v, start spread %v: must be positive",
			opts.Recheck, opts.ClientRecheck, opts.MinRecheck, opts.StartSpread)
	}
	s := &PrefixSelector{
		node:    node,
		scheme:  scheme,
		opts:    opts,
		attach:  att,
		group:   scheme.Group(node.Key()),
		trigger: make(chan struct{}, 1),
		retry:   make(chan struct{}, 1),
	}
	att.SetRole(s.note.state)
	att.OnRefusedAsNonSuperpeer(s.Recheck)
	return s, nil
}

// Scheme is the grouping in use.
func (s *PrefixSelector) Scheme() Prefix { return s.scheme }

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
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); s.keepalive(ctx) }()
	go func() { defer wg.Done(); defer stop(); s.loop(ctx, events) }()
	go func() { wg.Wait(); close(s.done) }()
	return nil
}

func (s *PrefixSelector) loop(ctx context.Context, events <-chan dht.RoutingEvent) {
	// The first lookup comes within StartSpread, spread by the peer's key:
	// a thousand peers started together do not all look up at once.
	k := s.node.Key()
	first := time.Duration(binary.BigEndian.Uint64(k[24:]) % uint64(s.opts.StartSpread+1))
	timer := time.NewTimer(first)
	defer timer.Stop()
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-s.trigger:
		case <-s.retry:
			s.retryPending(ctx)
			continue
		case ev := <-events:
			if !s.relevant(ev) {
				continue
			}
		}
		if wait := s.opts.MinRecheck - time.Since(last); wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
		last = time.Now()
		s.step(ctx)
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(s.nextRecheck())
	}
}

// relevant says whether a routing-table change can change who serves us:
// a peer added closer to our group key than our superpeer (or than us, when
// we are the superpeer; any peer of our group, when we know none), or our
// superpeer gone. Everything else is noise: in a large group every lookup
// puts its asker into the tables of the peers near the group key, and
// rechecking on each of those events makes lookups beget lookups.
func (s *PrefixSelector) relevant(ev dht.RoutingEvent) bool {
	role, sp := s.note.state()
	s.mu.Lock()
	home, named := s.home, s.named
	s.mu.Unlock()
	if !ev.Added {
		return ev.Peer == sp
	}
	k := dht.KeyOf(ev.Peer)
	if s.scheme.Group(k) != s.group {
		return false
	}
	ref := sp
	if role == Client && (sp == "" || !home) {
		// Not served at home: the reference is the superpeer our last
		// lookup named (it may not have learned its role yet). Every
		// event of the group counted here before, and in a group of
		// hundreds the unserved clients looked up on each other's
		// arrivals every MinRecheck.
		if ref = named; ref == "" {
			return true
		}
	}
	gk := s.scheme.GroupKey(s.group)
	return k.Xor(gk).Less(dht.KeyOf(ref).Xor(gk))
}

// nextRecheck is the time to the next periodic lookup: Recheck for a
// superpeer, an unattached peer or a client served away from its group
// (which moves home as soon as its own superpeer has room), ClientRecheck
// for a client attached at home, either varied by ±20% (derived from the key and the step count, so runs
// repeat) so that peers started together drift apart.
func (s *PrefixSelector) nextRecheck() time.Duration {
	d := s.opts.Recheck
	s.mu.Lock()
	attached := s.attached != "" && s.home
	misses := s.misses
	s.mu.Unlock()
	if role, _ := s.note.state(); role == Client && attached {
		d = s.opts.ClientRecheck
	} else if misses > 1 {
		// Unserved, or served away from home, after lookups in a row:
		// back off (2, 4, … × Recheck, at most ClientRecheck) so that a
		// crowd of peers that cannot be served yet does not swamp the
		// peers near its group key with lookups.
		d = min(s.opts.ClientRecheck, s.opts.Recheck<<min(misses-1, 16))
	}
	k := s.node.Key()
	x := splitmix(binary.BigEndian.Uint64(k[16:]) + s.steps.Load())
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

// superpeerOf looks up the superpeer of group g: the live peer XOR-closest
// to its group key, if it lies in the group (an empty group has none).
func (s *PrefixSelector) superpeerOf(ctx context.Context, g int) (peer.ID, bool, error) {
	s.lookups.Add(1)
	got, err := s.node.Closest(ctx, s.scheme.GroupKey(g), 1)
	if err != nil {
		return "", false, err
	}
	return got[0], s.scheme.Group(dht.KeyOf(got[0])) == g, nil
}

// fallbackGroups is how many other groups one step asks when our own
// superpeer cannot take us.
const fallbackGroups = 3

// step decides the role with one lookup and moves the attachment when the
// lookup says another superpeer should serve us. Renewals are keepalive's.
func (s *PrefixSelector) step(ctx context.Context) {
	s.steps.Add(1)
	defer func() {
		role, _ := s.note.state()
		s.mu.Lock()
		if role == Superpeer || (s.attached != "" && s.home) {
			s.misses = 0
		} else {
			s.misses++
		}
		s.mu.Unlock()
	}()
	self := s.node.ID()
	s.mu.Lock()
	s.pending, s.pendingTries = "", 0
	s.mu.Unlock()
	sp, _, err := s.superpeerOf(ctx, s.group)
	if err != nil {
		return // keep the state; the next recheck tries again
	}
	s.mu.Lock()
	cur, home := s.attached, s.home
	s.mu.Unlock()
	if gk := s.scheme.GroupKey(s.group); cur != "" && home && gk.Closer(dht.KeyOf(cur), dht.KeyOf(sp)) {
		// The superpeer serving us is alive (keepalive drops it when a
		// renewal fails) and closer to our group key than the answer: the
		// lookup missed it (a request that failed on a loaded network).
		// A lookup cannot un-know a live peer, so we stay.
		sp = cur
	}
	s.mu.Lock()
	s.named = sp
	s.mu.Unlock()
	role, _ := s.note.state()
	if sp == self {
		s.leave(ctx)
		s.note.set(Superpeer, self, "closest to its superpeer key", time.Now())
		return
	}
	if role == Superpeer {
		s.attach.DropClients()
	}
	s.mu.Lock()
	current := s.attached
	s.mu.Unlock()
	if current == sp {
		s.note.set(Client, sp, "superpeer of its group", time.Now())
		return
	}
	// Our group's superpeer first; if it is full, keep the one that serves
	// us now, or find the nearest group's superpeer that accepts.
	if s.try(ctx, sp, true, "superpeer of its group") {
		return
	}
	s.mu.Lock()
	waiting := s.pending == sp
	s.mu.Unlock()
	if current != "" || waiting {
		// Served already, or our superpeer has not learned its role yet
		// (notYet asks it again): only a full one sends us elsewhere.
		// Falling back here made every client of a starting swarm look
		// up every group's key while no superpeer knew its role yet.
		return
	}
	// A few groups per step, the nearest first: each costs a lookup, and
	// walking every group at once made each unserved client of a swarm
	// whose superpeers had not yet learned their roles look up every
	// group key (S lookups) in one step. Later steps go on from there, so
	// every group is tried while the client stays unserved.
	groups := s.scheme.GroupsByDistance(s.group)
	s.mu.Lock()
	from := s.fallbackFrom % max(1, len(groups))
	s.fallbackFrom = from + fallbackGroups
	s.mu.Unlock()
	for i := from; i < min(from+fallbackGroups, len(groups)); i++ {
		g := groups[i]
		other, inGroup, err := s.superpeerOf(ctx, g)
		if err != nil || !inGroup || other == sp || other == self {
			continue
		}
		if s.try(ctx, other, false, fmt.Sprintf("own superpeer full; group %d's accepted", g)) {
			s.mu.Lock()
			s.fallbackFrom = 0
			s.mu.Unlock()
			return
		}
	}
	s.note.set(Client, "", "no superpeer accepted", time.Now())
}

// keepalive renews the attachment every TTL/3, apart from the lookups so
// that a slow lookup cannot let it lapse; a refused or failed renewal ends
// the attachment and asks for a recheck.
func (s *PrefixSelector) keepalive(ctx context.Context) {
	tick := time.NewTicker(s.attach.TTL() / 3)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		s.mu.Lock()
		cur := s.attached
		s.mu.Unlock()
		if cur == "" {
			continue
		}
		ans, err := s.attach.Request(ctx, cur, false, nil, 0)
		if ctx.Err() != nil {
			return
		}
		if err == nil && ans.Status == Accepted {
			continue
		}
		s.mu.Lock()
		lost := s.attached == cur
		if lost {
			s.attached = ""
		}
		s.mu.Unlock()
		if lost {
			s.note.set(Client, "", "superpeer stopped serving", time.Now())
			// All the clients of a superpeer that fails notice within one
			// renewal of each other; their lookups of the group key are
			// spread over StartSpread so they do not arrive as one burst.
			// The wait runs beside the renewals: a step may attach us
			// elsewhere meanwhile (our superpeer left the routing table),
			// and that attachment must be renewed — waiting here let it
			// lapse for up to StartSpread.
			k := s.node.Key()
			x := splitmix(binary.BigEndian.Uint64(k[8:]) + s.steps.Load())
			delay := time.Duration(x % uint64(s.opts.StartSpread+1))
			time.AfterFunc(delay, func() {
				s.mu.Lock()
				served := s.attached != ""
				s.mu.Unlock()
				if !served && ctx.Err() == nil {
					s.Recheck()
				}
			})
		}
	}
}

// try asks sp to serve us and records it if it accepts.
func (s *PrefixSelector) try(ctx context.Context, sp peer.ID, home bool, reason string) bool {
	ans, err := s.attach.Request(ctx, sp, false, nil, 0)
	if err != nil || ans.Status != Accepted {
		if err == nil && ans.Status == NotSuperpeer && home {
			s.notYet(ctx, sp)
		}
		return false
	}
	s.mu.Lock()
	old := s.attached
	s.attached, s.home = sp, home
	if home {
		// A fallback keeps the pending retry: we move home once our own
		// superpeer knows its role.
		s.pending, s.pendingTries = "", 0
	}
	s.mu.Unlock()
	if old != "" && old != sp {
		_, _ = s.attach.Request(ctx, old, true, nil, 0)
	}
	s.note.set(Client, sp, reason, time.Now())
	return true
}

// notYet handles our group's superpeer refusing us because it has not
// learned its role yet (our refusal prompts it to look up). The lookup that
// named it is fresh, so we ask it again, without a lookup, after 1, 2, 4, …
// × MinRecheck (at most Recheck), until it accepts or our next periodic
// lookup names another. Looking up again instead made the hundreds of
// clients of a new superpeer swamp the peers near their group key.
func (s *PrefixSelector) notYet(ctx context.Context, sp peer.ID) {
	s.mu.Lock()
	if s.pending != sp {
		s.pending, s.pendingTries = sp, 0
	}
	s.pendingTries++
	tries := s.pendingTries
	s.mu.Unlock()
	delay := min(s.opts.Recheck, s.opts.MinRecheck<<min(tries-1, 16))
	go func() {
		select {
		case <-time.After(delay):
			select {
			case s.retry <- struct{}{}:
			default:
			}
		case <-ctx.Done():
		}
	}()
}

// retryPending asks the pending superpeer again, unless a lookup or an
// accepted attach has settled things since.
func (s *PrefixSelector) retryPending(ctx context.Context) {
	s.mu.Lock()
	sp, attached := s.pending, s.attached
	s.mu.Unlock()
	if sp == "" || attached == sp {
		return
	}
	if role, _ := s.note.state(); role == Superpeer {
		return
	}
	s.try(ctx, sp, true, "superpeer of its group")
}

// leave ends our attachment as a client.
func (s *PrefixSelector) leave(ctx context.Context) {
	s.mu.Lock()
	old := s.attached
	s.attached = ""
	s.mu.Unlock()
	if old != "" {
		_, _ = s.attach.Request(ctx, old, true, nil, 0)
	}
}

// Close stops the selector and the attach protocol.
func (s *PrefixSelector) Close() error {
	if s.cancel != nil {
		s.cancel()
		<-s.done
	}
	s.attach.Close()
	return nil
}

var _ Selector = (*PrefixSelector)(nil)
