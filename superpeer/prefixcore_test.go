package superpeer

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/superpeer-overlay/superpeer/dht"
)

// The core's tests use Exact(4): four groups by the top two bits of a key,
// group keys 00…, 01…, 10…, 11…. A peer's name says its key: "g1.3" is in
// group 1, at distance 3 (in the next bits) from the group key.
func coreScheme(t *testing.T) Prefix {
	t.Helper()
	s, err := Exact(4)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// coreKey is the key of the peer named "g<group>.<rank>": top bits the
// group, then the rank in the next 8 bits (a lower rank is closer to the
// group key).
func coreKey(name string) dht.Key {
	var g, r uint64
	if _, err := fmt.Sscanf(name, "g%d.%d", &g, &r); err != nil {
		panic(name)
	}
	return keyWithTop(g<<8|r, 10)
}

var coreOpts = options{
	Recheck:       10 * time.Second,
	ClientRecheck: 80 * time.Second,
	MinRecheck:    time.Second,
	StartSpread:   2 * time.Second,
	Attach:        attachOptions{TTL: 60 * time.Second}, // renewals every 20 s
}

// rig drives one core on a clock of its own.
type rig struct {
	t   *testing.T
	c   *PrefixCore
	t0  time.Time
	now time.Time
	ops []PrefixOp // the last call's
	// renewals makes tickUntil stop at renewals; otherwise it accepts them.
	renewals bool
}

func newRig(t *testing.T, self string, opts options) *rig {
	t.Helper()
	c, err := NewPrefixCore(peer.ID(self), coreKey(self), coreScheme(t), prefixWith(opts))
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, c: c, t0: time.Unix(1000, 0)}
	r.now = r.t0
	r.ops = c.Tick(r.now)
	return r
}

// tick moves the clock to the core's next deadline and ticks it.
func (r *rig) tick() *rig {
	r.t.Helper()
	next := r.c.Next()
	if next.IsZero() {
		r.t.Fatal("nothing timed")
	}
	if next.Before(r.now) {
		next = r.now
	}
	r.now = next
	r.ops = r.c.Tick(r.now)
	return r
}

// tickUntil ticks until the core asks for something (but a renewal,
// which it accepts unless r.renewals).
func (r *rig) tickUntil() *rig {
	r.t.Helper()
	for range 100 {
		r.tick()
		if len(r.ops) == 1 && r.ops[0].Kind == PrefixRenew && !r.renewals {
			r.answer(Accepted)
		}
		if len(r.ops) > 0 {
			return r
		}
	}
	r.t.Fatal("the core asked for nothing in 100 ticks")
	return r
}

func (r *rig) after(d time.Duration) *rig { r.now = r.now.Add(d); return r }

// op is the only op of the last call, of kind k.
func (r *rig) op(k PrefixOpKind) PrefixOp {
	r.t.Helper()
	if len(r.ops) != 1 || r.ops[0].Kind != k {
		r.t.Fatalf("ops %v, want one %v", r.ops, k)
	}
	return r.ops[0]
}

func (r *rig) look(name string) *rig {
	r.t.Helper()
	op := r.op(PrefixLookup)
	if name == "" {
		r.ops = r.c.Looked(r.now, op, "", dht.Key{}, false)
	} else {
		r.ops = r.c.Looked(r.now, op, peer.ID(name), coreKey(name), true)
	}
	return r
}

func (r *rig) answer(st Status) *rig {
	r.t.Helper()
	op := r.ops[len(r.ops)-1]
	if op.Kind != PrefixAttach && op.Kind != PrefixRenew {
		r.t.Fatalf("ops %v: last is no request", r.ops)
	}
	r.ops = r.c.Answered(r.now, op, st, true)
	return r
}

func (r *rig) fail() *rig {
	r.t.Helper()
	op := r.ops[len(r.ops)-1]
	r.ops = r.c.Answered(r.now, op, 0, false)
	return r
}

func (r *rig) role(want Role, sp string) *rig {
	r.t.Helper()
	if got, gotSP := r.c.Role(); got != want || gotSP != peer.ID(sp) {
		r.t.Fatalf("role %v served by %q, want %v by %q", got, gotSP, want, sp)
	}
	return r
}

// ops checks the last call's ops, written "lookup 1", "attach g0.1",
// "leave g0.2", "renew g0.1", "drop".
func (r *rig) want(ops ...string) *rig {
	r.t.Helper()
	var got []string
	for _, op := range r.ops {
		switch op.Kind {
		case PrefixLookup:
			got = append(got, fmt.Sprintf("lookup %d", op.Group))
		case PrefixDrop:
			got = append(got, "drop")
		default:
			got = append(got, fmt.Sprintf("%v %s", op.Kind, string(op.Peer)))
		}
	}
	if !slices.Equal(got, ops) {
		r.t.Fatalf("ops [%s], want [%s]", strings.Join(got, ", "), strings.Join(ops, ", "))
	}
	return r
}

// within checks that the next periodic step is d (±20%) from now.
func (r *rig) within(d time.Duration) *rig {
	r.t.Helper()
	got := r.c.nextAt.Sub(r.now)
	if got < d*8/10 || got > d*12/10 {
		r.t.Fatalf("next step in %v, want %v ±20%%", got, d)
	}
	return r
}

// client attaches self at home to sp, through one step.
func (r *rig) client(sp string) *rig {
	r.t.Helper()
	return r.tickUntil().want("lookup 0").look(sp).want("attach "+sp).answer(Accepted).want().role(Client, sp)
}

func TestPrefixCore_FirstStepWithinStartSpread(t *testing.T) {
	r := newRig(t, "g0.1", coreOpts)
	r.want().role(Unknown, "")
	r.tickUntil().want("lookup 0")
	if d := r.now.Sub(r.t0); d > coreOpts.StartSpread {
		t.Fatalf("first step after %v, spread %v", d, coreOpts.StartSpread)
	}
}

func TestPrefixCore_Decisions(t *testing.T) {
	cases := []struct {
		name string
		run  func(r *rig)
	}{
		{"superpeer when the lookup answers itself", func(r *rig) {
			r.tickUntil().want("lookup 0").look("g0.1").want().role(Superpeer, "g0.1").within(coreOpts.Recheck)
		}},
		{"client of the answer otherwise", func(r *rig) {
			r.client("g0.0").within(coreOpts.ClientRecheck)
		}},
		{"keeps a live home superpeer closer than the lookup's answer", func(r *rig) {
			r.client("g0.0")
			r.tickUntil().want("lookup 0").look("g0.1").want().role(Client, "g0.0") // the lookup missed g0.0
		}},
		{"moves to a closer superpeer and leaves the old", func(r *rig) {
			r.client("g0.2")
			r.tickUntil().want("lookup 0").look("g0.0").want("attach g0.0").
				answer(Accepted).want("leave g0.2").role(Client, "g0.0")
		}},
		{"superpeer becoming a client drops its clients", func(r *rig) {
			r.tickUntil().look("g0.1").role(Superpeer, "g0.1")
			r.tickUntil().want("lookup 0").look("g0.0").want("drop", "attach g0.0").answer(Accepted).role(Client, "g0.0")
		}},
		{"a demoted superpeer is a client even while its new superpeer does not know its role", func(r *rig) {
			r.tickUntil().look("g0.1").role(Superpeer, "g0.1")
			r.tickUntil().want("lookup 0").look("g0.0").want("drop", "attach g0.0").answer(NotSuperpeer).role(Client, "")
			r.tickUntil().want("attach g0.0").answer(Accepted).role(Client, "g0.0") // the retry
		}},
		{"client becoming the superpeer leaves its superpeer", func(r *rig) {
			r.client("g0.2")
			r.tickUntil().want("lookup 0").look("g0.1").want("leave g0.2").role(Superpeer, "g0.1")
		}},
		{"superpeer stays while the lookups say so", func(r *rig) {
			r.tickUntil().look("g0.1").role(Superpeer, "g0.1")
			r.tickUntil().look("g0.1").want().role(Superpeer, "g0.1").within(coreOpts.Recheck)
		}},
		{"lookup failure: no role, rechecks backing off", func(r *rig) {
			r.tickUntil().look("").want().role(Unknown, "").within(coreOpts.Recheck)
			r.tickUntil().look("").within(2 * coreOpts.Recheck)
			r.tickUntil().look("").within(4 * coreOpts.Recheck)
			r.tickUntil().look("").within(8 * coreOpts.Recheck)
			r.tickUntil().look("").within(coreOpts.ClientRecheck) // at most
			r.tickUntil().look("g0.1").role(Superpeer, "g0.1").within(coreOpts.Recheck)
		}},
		{"a failed lookup keeps the role", func(r *rig) {
			r.client("g0.0")
			r.tickUntil().look("").want().role(Client, "g0.0").within(coreOpts.ClientRecheck)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.run(newRig(t, "g0.1", coreOpts)) })
	}
}

// A full home superpeer sends an unserved client to the other groups'
// superpeers, nearest group key first, three groups a step.
func TestPrefixCore_OverflowWalk(t *testing.T) {
	scheme := coreScheme(t)
	order := scheme.GroupsByDistance(0) // 1, 2, 3
	if !slices.Equal(order, []int{1, 2, 3}) {
		t.Fatalf("order %v", order)
	}
	r := newRig(t, "g0.5", coreOpts)
	r.tickUntil().want("lookup 0").look("g0.0").want("attach g0.0").answer(Full)
	r.want("lookup 1").look("g1.0").want("attach g1.0").answer(Full)
	// group 2 is empty: its key's closest peer is in group 3, skipped.
	r.want("lookup 2").look("g3.0")
	r.want("lookup 3").look("g3.0").want("attach g3.0").fail()
	r.want().role(Client, "").within(coreOpts.Recheck)
	// The next step goes on where the walk stopped: round again from the
	// nearest (backing off: unserved twice).
	r.tickUntil().want("lookup 0").look("g0.0").want("attach g0.0").answer(Full)
	r.want("lookup 1").look("g1.0").want("attach g1.0").answer(Accepted).want().role(Client, "g1.0")
	if !strings.Contains(r.c.reason, "group 1's accepted") {
		t.Fatalf("reason %q", r.c.reason)
	}
	// Served away from home: the next step, a Recheck on (no backoff once
	// served), asks home and stays if full.
	r.within(coreOpts.Recheck)
	r.tickUntil().want("lookup 0").look("g0.0").want("attach g0.0").answer(Full).want().role(Client, "g1.0")
	// Home has room later: it moves home and leaves group 1's superpeer.
	r.within(coreOpts.Recheck)
	r.tickUntil().want("lookup 0").look("g0.0").want("attach g0.0").answer(Accepted).want("leave g1.0").role(Client, "g0.0")
}

// The walk asks at most three groups a step and goes on from there.
func TestPrefixCore_OverflowWalkThreeGroupsAStep(t *testing.T) {
	scheme, _ := Exact(8)
	c, err := NewPrefixCore("me", keyWithTop(0b000_1, 4), scheme, prefixWith(coreOpts))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	ops := c.Tick(now)
	keyOf := func(g int) dht.Key { k := scheme.GroupKey(g); k[31] = 1; return k }
	var asked [][]int
	for step := 0; step < 3; step++ {
		for len(ops) == 0 {
			now = c.Next()
			ops = c.Tick(now)
		}
		var groups []int
		ops = c.Looked(now, ops[0], "home", keyOf(0), true)
		ops = c.Answered(now, ops[0], Full, true)
		for len(ops) == 1 && ops[0].Kind == PrefixLookup {
			g := ops[0].Group
			groups = append(groups, g)
			ops = c.Looked(now, ops[0], peer.ID(fmt.Sprint("sp", g)), keyOf(g), true)
			ops = c.Answered(now, ops[0], Full, true)
		}
		asked = append(asked, groups)
	}
	order := scheme.GroupsByDistance(0)
	want := [][]int{order[0:3], order[3:6], {order[6]}}
	if fmt.Sprint(asked) != fmt.Sprint(want) {
		t.Fatalf("walks %v, want %v", asked, want)
	}
}

// A home superpeer that has not learned its role is asked again after 1,
// 2, 4 × MinRecheck without lookups, and no other group is tried meanwhile.
func TestPrefixCore_NotSuperpeerRetries(t *testing.T) {
	o := coreOpts
	o.Recheck, o.ClientRecheck = time.Minute, 8*time.Minute
	r := newRig(t, "g0.5", o)
	r.tickUntil().want("lookup 0").look("g0.0").want("attach g0.0").answer(NotSuperpeer).want().role(Unknown, "")
	var gaps []time.Duration
	for range 3 {
		before := r.now
		r.tickUntil().want("attach g0.0")
		gaps = append(gaps, r.now.Sub(before))
		r.answer(NotSuperpeer).want()
	}
	if want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}; !slices.Equal(gaps, want) {
		t.Fatalf("retries after %v, want %v", gaps, want)
	}
	r.tickUntil().want("attach g0.0").answer(Accepted).role(Client, "g0.0")
	if r.c.pending != "" || !r.c.retryAt.IsZero() {
		t.Fatal("a pending retry outlived the acceptance")
	}
}

// A request to our group's superpeer that gets no answer is asked again
// (1, 2 × MinRecheck), not answered by walking to other groups; after
// homeFailTries failures in a row the next step walks.
func TestPrefixCore_FailedHomeRequestRetries(t *testing.T) {
	o := coreOpts
	o.Recheck, o.ClientRecheck = time.Minute, 8*time.Minute
	r := newRig(t, "g0.5", o)
	r.tickUntil().want("lookup 0").look("g0.0").want("attach g0.0").fail().want().role(Unknown, "")
	var gaps []time.Duration
	for range homeFailTries - 1 {
		before := r.now
		r.tickUntil().want("attach g0.0")
		gaps = append(gaps, r.now.Sub(before))
		r.fail().want()
	}
	if want := []time.Duration{time.Second, 2 * time.Second}; !slices.Equal(gaps, want) {
		t.Fatalf("retries after %v, want %v", gaps, want)
	}
	// No retry is left: the next step looks up, and its failed request
	// walks to the nearest group.
	r.tickUntil().want("lookup 0").look("g0.0").want("attach g0.0").fail()
	r.want("lookup 1").look("g1.0").want("attach g1.0").answer(Accepted).role(Client, "g1.0")
	// An answer clears the count: home answers, then fails once more, and
	// is asked again rather than walked away from.
	r.tickUntil().want("lookup 0").look("g0.0").want("attach g0.0").answer(Full).want().role(Client, "g1.0")
	r.tickUntil().want("lookup 0").look("g0.0").want("attach g0.0").fail().want()
	r.tickUntil().want("attach g0.0").answer(Accepted).want("leave g1.0").role(Client, "g0.0")
}

// renewingClient is a rig whose core is a client of g0.0 that only renews
// (no periodic steps), stopping at each renewal.
func renewingClient(t *testing.T) *rig {
	t.Helper()
	o := coreOpts
	o.ClientRecheck = time.Hour
	r := newRig(t, "g0.5", o)
	r.renewals = true
	r.client("g0.0")
	return r
}

// Renewals every TTL/3; a refused one ends the attachment and brings a step
// within StartSpread.
func TestPrefixCore_Renewals(t *testing.T) {
	r := renewingClient(t)
	renew := coreOpts.Attach.TTL / 3
	for range 3 {
		r.tickUntil().want("renew g0.0")
		if d := r.now.Sub(r.t0); d%renew != 0 {
			t.Fatalf("renewal at %v, not on the TTL/3 ticker", d)
		}
		r.answer(Accepted).want().role(Client, "g0.0")
	}
	r.tickUntil().want("renew g0.0").answer(Full).want().role(Client, "")
	lost := r.now
	r.tickUntil().want("lookup 0")
	if d := r.now.Sub(lost); d > coreOpts.StartSpread {
		t.Fatalf("step %v after the lost renewal, spread %v", d, coreOpts.StartSpread)
	}
	r.look("g0.1").want("attach g0.1").answer(Accepted).role(Client, "g0.1")
}

// A renewal that fails (no answer) keeps the attachment while the next
// renewal is due before the superpeer would let it lapse; the second in a
// row ends it, and an accepted one in between starts the count again.
func TestPrefixCore_FailedRenewalKeepsTheAttachmentWithinTheTTL(t *testing.T) {
	r := renewingClient(t)
	r.tickUntil().want("renew g0.0").fail().want().role(Client, "g0.0")
	r.tickUntil().want("renew g0.0").answer(Accepted).want().role(Client, "g0.0")
	r.tickUntil().want("renew g0.0").fail().want().role(Client, "g0.0")
	r.tickUntil().want("renew g0.0").fail().want().role(Client, "")
	lost := r.now
	r.tickUntil().want("lookup 0")
	if d := r.now.Sub(lost); d > coreOpts.StartSpread {
		t.Fatalf("step %v after the lost attachment, spread %v", d, coreOpts.StartSpread)
	}
}

// A renewal that fails late (its answer timed out past the next tick) ends
// the attachment once the tick after it comes too late for the TTL.
func TestPrefixCore_LateFailedRenewalEndsTheAttachment(t *testing.T) {
	r := renewingClient(t)
	renew := coreOpts.Attach.TTL / 3
	r.tickUntil().want("renew g0.0").after(2*renew+time.Second).fail().want().role(Client, "")
}

// A renewal that is out when the step moves us is answered for a superpeer
// we left: ignored. So are answers to ops no longer awaited.
func TestPrefixCore_StaleAnswersIgnored(t *testing.T) {
	r := newRig(t, "g0.5", coreOpts)
	r.client("g0.2")
	r.renewals = true
	renewal := r.tickUntil().op(PrefixRenew)
	r.ops = r.c.Recheck(r.now)
	r.want("lookup 0").look("g0.0").want("attach g0.0").answer(Accepted).want("leave g0.2").role(Client, "g0.0")
	if ops := r.c.Answered(r.now, renewal, Full, true); len(ops) != 0 {
		t.Fatalf("stale renewal answer: %v", ops)
	}
	r.role(Client, "g0.0")
	if ops := r.c.Answered(r.now, PrefixOp{Kind: PrefixAttach, Peer: "g0.0"}, Full, true); len(ops) != 0 {
		t.Fatalf("unasked answer: %v", ops)
	}
	if ops := r.c.Looked(r.now, PrefixOp{Kind: PrefixLookup}, "g0.5", coreKey("g0.5"), true); len(ops) != 0 {
		t.Fatalf("unasked lookup answer: %v", ops)
	}
	r.role(Client, "g0.0")
}

// Rechecks are spaced by MinRecheck; one during a step brings another after.
func TestPrefixCore_RecheckSpacing(t *testing.T) {
	r := newRig(t, "g0.5", coreOpts)
	r.client("g0.0")
	steps := []time.Time{r.c.lastStep}
	r.ops = r.c.Recheck(r.now)
	r.want()
	r.tick().want("lookup 0")
	steps = append(steps, r.now)
	if ops := r.c.Recheck(r.now); len(ops) != 0 { // during the step
		t.Fatalf("ops %v during a step", ops)
	}
	r.look("g0.0").want().role(Client, "g0.0")
	r.tick().want("lookup 0")
	steps = append(steps, r.now)
	r.look("g0.0").want().within(coreOpts.ClientRecheck)
	for i := 1; i < len(steps); i++ {
		if d := steps[i].Sub(steps[i-1]); d != coreOpts.MinRecheck {
			t.Fatalf("steps at %v: not MinRecheck apart", steps)
		}
	}
	// Rechecks while one is held back make one step.
	r.after(coreOpts.MinRecheck / 2)
	for range 3 {
		if ops := r.c.Recheck(r.now); len(ops) != 0 {
			t.Fatalf("ops %v while held back", ops)
		}
	}
	r.tick().want("lookup 0").look("g0.0").want()
	if next := r.c.Next(); next.Sub(r.now) < coreOpts.MinRecheck {
		t.Fatal("another step right after")
	}
}

// Routing-table changes: only a peer of our group closer to the group key
// than our superpeer, or our superpeer's removal, brings a step; changes
// during a step wait for its outcome.
func TestPrefixCore_RoutingChanges(t *testing.T) {
	r := newRig(t, "g0.5", coreOpts)
	routing := func(name string, added bool) []PrefixOp {
		return r.c.routing(r.now, peer.ID(name), coreKey(name), added)
	}
	// Before the first step, nothing brings it forward: it comes within
	// StartSpread and sees the table as it is then.
	if ops := routing("g0.9", true); len(ops) != 0 {
		t.Fatalf("ops %v before the first step", ops)
	}
	// A first step that named nobody: then any peer of the group counts.
	r.tickUntil().want("lookup 0").look("").want()
	r.after(2 * coreOpts.MinRecheck)
	r.ops = routing("g0.9", true)
	r.want("lookup 0")
	// During the step: queued, then judged once g0.3 serves us.
	for _, name := range []string{"g0.4", "g1.0", "g0.2"} {
		if ops := routing(name, true); len(ops) != 0 {
			t.Fatalf("ops %v during a step", ops)
		}
	}
	r.look("g0.3").want("attach g0.3").answer(Accepted).role(Client, "g0.3")
	// g0.4 is farther, g1.0 in another group, g0.2 closer: a step.
	r.want()
	r.tick().want("lookup 0").look("g0.3").want()
	r.after(2 * coreOpts.MinRecheck)
	cases := []struct {
		name  string
		added bool
		step  bool
	}{
		{"g0.7", true, false},  // farther than g0.3
		{"g2.0", true, false},  // another group
		{"g0.1", false, false}, // someone else gone
		{"g0.1", true, true},   // closer
	}
	for _, c := range cases {
		ops := routing(c.name, c.added)
		if got := len(ops) == 1 && ops[0].Kind == PrefixLookup; got != c.step {
			t.Fatalf("%s added %v: ops %v, want a step %v", c.name, c.added, ops, c.step)
		}
		if c.step {
			r.ops = ops
			r.look("g0.3").want()
			r.after(2 * coreOpts.MinRecheck)
		}
	}
	if ops := routing("g0.3", false); len(ops) != 1 || ops[0].Kind != PrefixLookup {
		t.Fatalf("our superpeer gone: %v", ops)
	}
}

func TestPrefixCore_Options(t *testing.T) {
	if _, err := NewPrefixCore("", dht.Key{}, coreScheme(t)); err == nil {
		t.Fatal("empty ID accepted")
	}
	if _, err := NewPrefixCore("a", dht.Key{}, coreScheme(t), WithRecheck(-time.Second)); !errors.Is(err, ErrOption) {
		t.Fatal("negative recheck accepted")
	}
	if _, err := NewPrefixCore("a", dht.Key{}, coreScheme(t), WithTTL(2)); !errors.Is(err, ErrOption) {
		t.Fatal("a TTL without a renewal period accepted")
	}
	c, err := NewPrefixCore("a", dht.Key{}, coreScheme(t))
	if err != nil {
		t.Fatal(err)
	}
	if c.recheck != 30*time.Second || c.clientRecheck != 240*time.Second || c.minRecheck != 500*time.Millisecond ||
		c.startSpread != time.Second || c.renewEvery != 10*time.Second {
		t.Fatalf("defaults %v %v %v %v %v", c.recheck, c.clientRecheck, c.minRecheck, c.startSpread, c.renewEvery)
	}
	for k := PrefixLookup; k <= PrefixDrop+1; k++ {
		if k.String() == "" {
			t.Fatal("no name")
		}
	}
}

// A new code (S from 4 to 5: group 00 splits into 000 and 001) leaves a
// peer of the half that keeps the group key alone, sends a peer of the
// other half to its new group's superpeer, and waits for a step under way
// to end before it takes effect.
func TestPrefixCore_SetScheme(t *testing.T) {
	five, err := Exact(5) // groups 000, 001, 01, 10, 11
	if err != nil {
		t.Fatal(err)
	}
	t.Run("same group key: nothing", func(t *testing.T) {
		r := newRig(t, "g0.1", coreOpts).client("g0.0")
		next := r.c.nextAt
		r.after(time.Minute)
		r.ops = r.c.SetScheme(r.now, five)
		r.want().role(Client, "g0.0")
		if r.c.nextAt != next {
			t.Fatalf("next step moved from %v to %v", next, r.c.nextAt)
		}
	})
	t.Run("new group key: a step to the new group's superpeer", func(t *testing.T) {
		r := newRig(t, "g0.200", coreOpts).client("g0.0")
		r.after(time.Minute)
		r.ops = r.c.SetScheme(r.now, five)
		r.want("lookup 1")
		if op := r.op(PrefixLookup); op.Key != five.GroupKey(1) {
			t.Fatalf("looks up %x, want the new group key", op.Key[:2])
		}
		r.look("g0.130").want("attach g0.130").answer(Accepted).want("leave g0.0").role(Client, "g0.130")
	})
	t.Run("during a step: after it", func(t *testing.T) {
		r := newRig(t, "g0.200", coreOpts)
		r.tickUntil().want("lookup 0")
		look := r.op(PrefixLookup)
		r.ops = r.c.SetScheme(r.now, five)
		r.want()
		r.ops = []PrefixOp{look}
		r.look("g0.0").want("attach g0.0").answer(Accepted).role(Client, "g0.0")
		r.tickUntil().want("lookup 1")
		if d := r.now.Sub(r.c.lastStep); d != 0 {
			t.Fatalf("lastStep not now: %v", d)
		}
	})
	t.Run("a superpeer whose group merges away becomes a client", func(t *testing.T) {
		r := newRig(t, "g0.200", coreOpts)
		r.ops = r.c.SetScheme(r.now, five)
		r.want("lookup 1").look("g0.200").role(Superpeer, "g0.200")
		r.after(time.Minute)
		r.ops = r.c.SetScheme(r.now, coreScheme(t))
		r.want("lookup 0").look("g0.0").want("drop", "attach g0.0").answer(Accepted).role(Client, "g0.0")
	})
}

// A superpeer counts as settled (its census report) only an attachment TTL
// after it took its role under the code in use: a new code, or a step that
// makes it superpeer anew, starts the wait again; a step that confirms the
// role does not.
func TestPrefixCore_Settled(t *testing.T) {
	const ttl = 60 * time.Second
	r := newRig(t, "g0.1", coreOpts)
	if r.c.settled(r.now, 0) {
		t.Fatal("settled before any role")
	}
	r.tickUntil().look("g0.1").role(Superpeer, "g0.1")
	since := r.now
	if r.c.settled(r.now, ttl) || !r.c.settled(r.now, 0) {
		t.Fatal("settled at once, or not even for a zero wait")
	}
	r.tickUntil().look("g0.1").role(Superpeer, "g0.1") // confirmed: the wait goes on
	if r.now.Sub(since) >= ttl {
		t.Fatalf("the next step came %v later; the test wants it within the TTL", r.now.Sub(since))
	}
	if r.c.settled(r.now, ttl) || !r.c.settled(since.Add(ttl), ttl) {
		t.Fatalf("settled at %v after the role, or not at the TTL", r.now.Sub(since))
	}
	// A new code: not settled until the role is confirmed under it and a
	// TTL has passed.
	five, err := Exact(5)
	if err != nil {
		t.Fatal(err)
	}
	r.after(time.Minute)
	r.ops = r.c.SetScheme(r.now, five)
	if r.c.settled(r.now.Add(ttl), ttl) {
		t.Fatal("settled under a code it has not stepped under")
	}
	r.want("lookup 0").look("g0.1").role(Superpeer, "g0.1")
	if at := r.now; r.c.settled(at.Add(ttl-time.Millisecond), ttl) || !r.c.settled(at.Add(ttl), ttl) {
		t.Fatal("the wait did not start again under the new code")
	}
	// Demoted and made superpeer again: the wait starts again.
	r.tickUntil().look("g0.0").want("drop", "attach g0.0").answer(Accepted).role(Client, "g0.0")
	if r.c.settled(r.now.Add(ttl), ttl) {
		t.Fatal("a client counts as settled")
	}
}
