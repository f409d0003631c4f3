package census

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestTarget(t *testing.T) {
	c := Config{Fraction: 0.01}
	if err := c.fill(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		n    float64
		cur  int
		want int
	}{
		{0, 0, 1},         // never 0
		{40, 0, 1},        // f·n = 0.4 rounds to 0: Min
		{1000, 0, 10},     // no count yet: round(f·n)
		{1050, 10, 10},    // within the band (±0.6)
		{1059, 10, 10},    // at its edge
		{1070, 10, 11},    // past it
		{940, 10, 10},     // the other side
		{930, 10, 9},      // past it
		{1040, 11, 11},    // going back needs the whole band: 10.4 stays 11
		{1035, 11, 10},    // 10.35 is past 11 − 0.6
		{20000, 200, 200}, // 5% of 200 is 10: 200 holds from 190 to 210
		{21000, 200, 200},
		{21100, 200, 211},
		{18900, 200, 189},
		{math.Inf(1), 0, 1 << 32}, // never past Max
		{math.NaN(), 5, 1},
	} {
		if got := c.Target(tc.n, tc.cur); got != tc.want {
			t.Errorf("Target(%v, %d) = %d, want %d", tc.n, tc.cur, got, tc.want)
		}
	}
}

func TestConfig_Invalid(t *testing.T) {
	for _, c := range []Config{
		{Fraction: 0}, {Fraction: -0.1}, {Fraction: 1.5}, {Fraction: math.NaN()},
		{Fraction: 0.1, Hysteresis: 0.7}, {Fraction: 0.1, Slack: 0.2},
		{Fraction: 0.1, Min: -1}, {Fraction: 0.1, HoldDown: -time.Second}, {Fraction: 0.1, Min: 5, Max: 4}, {Fraction: 0.1, Quorum: 1.5}, {Fraction: 0.1, Quorum: math.NaN()}, {Fraction: 0.1, ConfirmFor: -time.Second},
	} {
		if _, err := New(c, "a", Value{S: 1}); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: err %v, want ErrConfig", c, err)
		}
	}
	if _, err := New(Config{Fraction: 0.1, Min: 2}, "a", Value{S: 1}); !errors.Is(err, ErrConfig) {
		t.Errorf("initial S below Min accepted: %v", err)
	}
}

// Values are ordered by version, then S; a peer takes only fresher ones,
// and a newer value drops the reports made under older ones.
func TestObserveAndMerge(t *testing.T) {
	c, err := New(Config{Fraction: 0.1}, "a", Value{S: 4})
	if err != nil {
		t.Fatal(err)
	}
	if c.Observe(t0, Value{S: 9, Version: 0}) != true || c.Value() != (Value{S: 9}) {
		t.Fatalf("same version, larger S not taken: %v", c.Value())
	}
	if c.Observe(t0, Value{S: 3, Version: 0}) || c.Value().S != 9 {
		t.Fatalf("same version, smaller S taken: %v", c.Value())
	}
	c.Report(t0, 5, 0.5)
	c.Merge(t0, Value{S: 9}, []Entry{{ID: "b", Peers: 7, Share: 0.5, Seq: 2}, {ID: "c", Peers: 0, Share: 0.1, Seq: 1}, {ID: "", Peers: 3, Share: 0.1}, {ID: "e", Peers: 3, Share: math.NaN()}, {ID: "f", Peers: 3, Share: 2}, {ID: "g", Peers: 1 << 30, Share: 1e-300}})
	c.Merge(t0, Value{S: 9}, []Entry{{ID: "b", Peers: 1, Share: 0.5, Seq: 1}, {ID: "a", Peers: 100, Share: 0.5, Seq: 99}})
	if n, k := c.Size(t0); n != 12 || k != 2 {
		t.Fatalf("size %v from %d reports, want 12 from 2 (own 5 + b's freshest 7; bad entries ignored)", n, k)
	}
	c.Merge(t0, Value{S: 2, Version: 1}, []Entry{{ID: "d", Peers: 3, Share: 0.25, Version: 1, Seq: 1}, {ID: "b", Peers: 7, Share: 0.5, Version: 0, Seq: 9}})
	if c.Value() != (Value{S: 2, Version: 1}) {
		t.Fatalf("newer version not adopted: %v", c.Value())
	}
	if n, k := c.Size(t0); n != 12 || k != 1 {
		t.Fatalf("after a new value: size %v from %d, want only d's report (3 peers for a quarter: 12)", n, k)
	}
	if c.Observe(t0, Value{S: 50, Version: 0}) {
		t.Fatal("an older version taken")
	}
}

// A superpeer proposes only with its own report in, a table of at least S
// reports, and its value held for the hold-down; reports expire.
func TestTick_Guards(t *testing.T) {
	// ConfirmFor out of the way (TestTick_ConfirmFor checks it).
	cfg := Config{Fraction: 0.1, HoldDown: 10 * time.Second, Expire: 30 * time.Second, ConfirmFor: time.Nanosecond}
	c, err := New(cfg, "a", Value{S: 2})
	if err != nil {
		t.Fatal(err)
	}
	now := t0
	c.Tick(now)
	c.Merge(now, Value{S: 2}, []Entry{{ID: "b", Peers: 60, Share: 0.5, Seq: 1}})
	if _, ch := c.Tick(now.Add(time.Minute)); ch {
		t.Fatal("proposed without a report of its own")
	}
	c.Report(now, 40, 0.5)
	if _, ch := c.Tick(now.Add(5 * time.Second)); ch {
		t.Fatal("proposed within the hold-down")
	}
	// 100 peers at f = 0.1: S should be 10 (b's report expires at 30 s);
	// the first tick that finds it only counts, the second (Confirm)
	// proposes.
	if v, ch := c.Tick(now.Add(28 * time.Second)); ch {
		t.Fatalf("proposed %v on the first tick outside the band", v)
	}
	if v, ch := c.Tick(now.Add(29 * time.Second)); !ch || v != (Value{S: 10, Version: 1}) {
		t.Fatalf("did not propose S=10 v1 with a full table on the second tick: %v %v", v, ch)
	}
	// With S = 4 a table needs reports from two superpeers.
	c2, _ := New(cfg, "a", Value{S: 4})
	c2.Tick(now)
	c2.Report(now, 40, 0.25)
	c2.Merge(now, Value{S: 4}, []Entry{{ID: "b", Peers: 60, Share: 0.25, Seq: 1}})
	if n, k := c2.Size(now.Add(29 * time.Second)); n != 200 || k != 2 {
		t.Fatalf("before expiry: %v from %d, want 200 from 2", n, k)
	}
	if _, ch := c2.Tick(now.Add(31 * time.Second)); ch {
		t.Fatal("proposed from a table that lost b's expired report")
	}
	if n, k := c2.Size(now.Add(31 * time.Second)); n != 160 || k != 1 {
		t.Fatalf("after expiry: %v from %d, want 160 from 1 (40 peers for a quarter)", n, k)
	}
}

// Quorum 1 waits for every superpeer's report: three of four are not
// enough, the fourth is.
func TestTick_Quorum(t *testing.T) {
	cfg := Config{Fraction: 0.1, HoldDown: time.Second, Quorum: 1, Confirm: 1, ConfirmFor: time.Second}
	c, err := New(cfg, "a", Value{S: 4})
	if err != nil {
		t.Fatal(err)
	}
	c.Tick(t0)
	c.Report(t0, 40, 0.25)
	c.Merge(t0, Value{S: 4}, []Entry{{ID: "b", Peers: 40, Share: 0.25, Seq: 1}, {ID: "c", Peers: 40, Share: 0.25, Seq: 1}})
	if v, ch := c.Tick(t0.Add(2 * time.Second)); ch {
		t.Fatalf("proposed %v from 3 of 4 reports", v)
	}
	c.Merge(t0, Value{S: 4}, []Entry{{ID: "d", Peers: 40, Share: 0.25, Seq: 1}})
	if v, ch := c.Tick(t0.Add(3 * time.Second)); ch {
		t.Fatalf("proposed %v on the first tick outside the band (ConfirmFor 1 s)", v)
	}
	if v, ch := c.Tick(t0.Add(4 * time.Second)); !ch || v.S != 16 {
		t.Fatalf("with every report: %v %v, want S = 16 for 160 peers", v, ch)
	}
}

// ConfirmFor: the count must stay outside the band that long, not only
// for Confirm ticks; a tick back inside starts the wait again.
func TestTick_ConfirmFor(t *testing.T) {
	cfg := Config{Fraction: 0.1, HoldDown: time.Second, Quorum: 1, ConfirmFor: 10 * time.Second}
	c, err := New(cfg, "a", Value{S: 2})
	if err != nil {
		t.Fatal(err)
	}
	c.Tick(t0)
	report := func(at time.Time, peers int) {
		c.Report(at, peers, 0.5)
		c.Merge(at, Value{S: 2}, []Entry{{ID: "b", Peers: 20, Share: 0.5, Seq: uint64(at.Sub(t0) / time.Second)}})
	}
	report(t0.Add(2*time.Second), 20) // 40 peers: 4
	for s := 2; s < 11; s++ {
		if v, ch := c.Tick(t0.Add(time.Duration(s) * time.Second)); ch {
			t.Fatalf("proposed %v %d s after leaving the band", v, s-2)
		}
	}
	report(t0.Add(11*time.Second), 0) // 21 peers: 2, back inside
	c.Tick(t0.Add(11 * time.Second))
	report(t0.Add(12*time.Second), 20)
	for s := 12; s < 22; s++ {
		if v, ch := c.Tick(t0.Add(time.Duration(s) * time.Second)); ch {
			t.Fatalf("proposed %v %d s after leaving the band again", v, s-12)
		}
	}
	if v, ch := c.Tick(t0.Add(22 * time.Second)); !ch || v.S != 4 {
		t.Fatalf("10 s outside: %v %v, want S = 4", v, ch)
	}
}

// gossipNet is S superpeers (the first S of the peers) exchanging digests
// at random, each round every superpeer with one other, both ways; every
// client observes its superpeer's value each round.
type gossipNet struct {
	cfg   Config
	rng   *rand.Rand
	peers []*Census
	now   time.Time
}

func newGossipNet(t *testing.T, cfg Config, n, s0 int, seed uint64) *gossipNet {
	g := &gossipNet{cfg: cfg, rng: rand.New(rand.NewPCG(seed, 1)), now: t0}
	for i := 0; i < n; i++ {
		g.add(t, s0)
	}
	return g
}

func (g *gossipNet) add(t *testing.T, s0 int) {
	c, err := New(g.cfg, fmt.Sprintf("p%06d", len(g.peers)), Value{S: s0})
	if err != nil {
		t.Fatal(err)
	}
	g.peers = append(g.peers, c)
}

// round advances by dt: the superpeers are the first S peers by a peer's
// own value (at least one); the n peers are spread over them evenly.
func (g *gossipNet) round(dt time.Duration) {
	g.now = g.now.Add(dt)
	n := len(g.peers)
	// Superpeers: as many as the agreed S of peer 0 says (the method's
	// job, not the census's); each serves an even share.
	S := min(max(g.peers[0].Value().S, 1), n)
	for i := 0; i < n; i++ {
		if i < S {
			load := n / S
			if i < n%S {
				load++
			}
			g.peers[i].Report(g.now, load, 1/float64(S))
		} else {
			g.peers[i].Withdraw()
		}
	}
	for i := 0; i < S; i++ {
		j := g.rng.IntN(S)
		if j == i {
			continue
		}
		a, b := g.peers[i], g.peers[j]
		da, db := a.Digest(g.now), b.Digest(g.now)
		b.Merge(g.now, a.Value(), da)
		a.Merge(g.now, b.Value(), db)
	}
	for i := 0; i < S; i++ {
		g.peers[i].Tick(g.now)
	}
	for i := S; i < n; i++ {
		g.peers[i].Observe(g.now, g.peers[i%S].Value())
	}
}

func (g *gossipNet) agreed() (Value, bool) {
	v := g.peers[0].Value()
	for _, p := range g.peers {
		if p.Value() != v {
			return v, false
		}
	}
	return v, true
}

// As the network grows from 100 to 3000 peers and shrinks to 500, S stays
// within 10% of f·n (or the rounding) at steady state, is never 0, and
// every new value reaches every peer within a bounded time of its proposal.
func TestGossip_FollowsTheFraction(t *testing.T) {
	cfg := Config{Fraction: 0.01, HoldDown: 20 * time.Second, Expire: 30 * time.Second}
	worstSpread := 0
	for seed := uint64(1); seed <= 5; seed++ {
		g := newGossipNet(t, cfg, 100, 1, seed)
		for _, target := range []int{100, 400, 1000, 3000, 1500, 500} {
			for len(g.peers) < target {
				g.add(t, 1) // a new peer starts from its own configuration
			}
			if len(g.peers) > target {
				g.peers = g.peers[:target]
			}
			// spread: rounds from a value's first appearance until every
			// peer holds it (or a fresher one).
			var newest Value
			since := -1
			for r := 0; r < 600; r++ {
				g.round(time.Second)
				for _, p := range g.peers {
					if v := p.Value(); v.S < 1 {
						t.Fatalf("seed %d n %d: S = %d", seed, target, v.S)
					} else if v.Beats(newest) {
						newest, since = v, r
					}
				}
				if v, ok := g.agreed(); ok && v == newest && since >= 0 {
					worstSpread = max(worstSpread, r-since)
					since = -1
				}
			}
			v, ok := g.agreed()
			if !ok || since >= 0 {
				t.Fatalf("seed %d n %d: peers disagree after 10 min (newest %v since round %d)", seed, target, newest, since)
			}
			want := cfg.Fraction * float64(target)
			if d := math.Abs(float64(v.S) - want); d > max(0.6, 0.1*want) {
				t.Fatalf("seed %d n %d: S = %d, f·n = %.1f", seed, target, v.S, want)
			}
		}
	}
	// Each round every superpeer gossips once and every client hears its
	// superpeer: a value crosses the superpeers in O(log S) rounds.
	if worstSpread > 15 {
		t.Fatalf("a new value took %d rounds to reach every peer", worstSpread)
	}
	t.Logf("worst spread of a new value: %d rounds", worstSpread)
}

// With n jittering around a boundary, the value does not flap: the band
// absorbs the jitter, and after one change the count stays put.
func TestGossip_NoFlapping(t *testing.T) {
	cfg := Config{Fraction: 0.01, HoldDown: 5 * time.Second, Expire: 30 * time.Second}
	// changes runs 2000 rounds of n wandering over 1042..1058 — f·n from
	// 10.42 to 10.58, on both sides of the rounding boundary of 10.5 — and
	// counts the changes of the value.
	changes := func(cfg Config) (int, Value) {
		g := newGossipNet(t, cfg, 1050, 10, 3)
		rng := rand.New(rand.NewPCG(9, 9))
		n, last := 0, g.peers[0].Value()
		for r := 0; r < 2000; r++ {
			target := 1042 + rng.IntN(17)
			for len(g.peers) < target {
				g.add(t, 10)
			}
			g.peers = g.peers[:target]
			g.round(time.Second)
			if v := g.peers[0].Value(); v != last {
				n++
				last = v
			}
		}
		return n, last
	}
	if n, last := changes(cfg); n != 0 {
		t.Fatalf("S changed %d times while f·n stayed within 10.42..10.58 (now %v)", n, last)
	}
	// The band is what holds it: half a superpeer of slack, no relative
	// band, and the same jitter moves S back and forth.
	narrow := cfg
	narrow.Slack, narrow.Hysteresis, narrow.ConfirmFor = 0.5, 1e-9, time.Nanosecond
	if n, _ := changes(narrow); n < 10 {
		t.Fatalf("without the band S changed only %d times: the test cannot tell", n)
	}
}

// Past MaxReports superpeers the table keeps the most recently heard and
// extrapolates: loads drawn around n·share over groups of two sizes (as
// the exact prefix code makes them) estimate n within a few percent.
func TestSize_Sample(t *testing.T) {
	const n, S = 1_000_000, 3000 // k = 12: 1096 groups of 1/4096, 1904 of 1/2048
	rng := rand.New(rand.NewPCG(4, 4))
	c, err := New(Config{Fraction: float64(S) / n}, "me", Value{S: S})
	if err != nil {
		t.Fatal(err)
	}
	var es []Entry
	deep := 2 * (S - 2048)
	for g := 0; g < S; g++ {
		share := 1.0 / 2048
		if g < deep {
			share = 1.0 / 4096
		}
		mean := n * share
		load := int(mean + rng.NormFloat64()*math.Sqrt(mean))
		es = append(es, Entry{ID: fmt.Sprintf("g%04d", g), Peers: load, Share: share, Seq: 1})
	}
	rng.Shuffle(len(es), func(i, j int) { es[i], es[j] = es[j], es[i] })
	for i := 0; i < len(es); i += 50 {
		c.Merge(t0.Add(time.Duration(i)*time.Millisecond), Value{S: S}, es[i:min(i+50, len(es))])
	}
	got, k := c.Size(t0.Add(time.Second))
	if k != 128 {
		t.Fatalf("table holds %d reports, want MaxReports 128", k)
	}
	if math.Abs(got-n)/n > 0.03 {
		t.Fatalf("estimate %.0f from %d reports, want within 3%% of %d", got, k, n)
	}
	// The most recently heard stay: the last two batches of 50 and 28 of
	// the one before.
	recent := map[string]bool{}
	for _, e := range es[len(es)-150:] {
		recent[e.ID] = true
	}
	for _, e := range c.Digest(t0.Add(time.Second)) {
		if !recent[e.ID] {
			t.Fatalf("report %s kept, not among the most recently heard", e.ID)
		}
	}
}

// A proposal goes by the median of the estimates the reports carry: a table
// of its own that strays does not move S while the others' estimates are
// within the band, and does once they are not.
func TestTick_MedianOfEstimates(t *testing.T) {
	cfg := Config{Fraction: 0.01, HoldDown: time.Second, Expire: time.Minute, Confirm: 1, ConfirmFor: time.Second}
	c, err := New(cfg, "a", Value{S: 4})
	if err != nil {
		t.Fatal(err)
	}
	now := t0
	c.Tick(now)
	// This peer's own table says 800 peers (S = 8), the four others' each
	// said about 400 when they reported.
	c.Report(now, 200, 0.25)
	c.Merge(now, Value{S: 4}, []Entry{
		{ID: "b", Peers: 200, Share: 0.25, Seq: 1, Estimate: 410},
		{ID: "c", Peers: 200, Share: 0.25, Seq: 1, Estimate: 395},
		{ID: "d", Peers: 200, Share: 0.25, Seq: 1, Estimate: 402},
		{ID: "e", Peers: 200, Share: 0.25, Seq: 1, Estimate: 398},
	})
	if n, _ := c.Size(now); n != 800 {
		t.Fatalf("own estimate %v, want 800", n)
	}
	if v, ch := c.Tick(now.Add(2 * time.Second)); ch {
		t.Fatalf("proposed %v on one stray table", v)
	}
	c.Merge(now, Value{S: 4}, []Entry{
		{ID: "b", Peers: 200, Share: 0.25, Seq: 2, Estimate: 790},
		{ID: "c", Peers: 200, Share: 0.25, Seq: 2, Estimate: 805},
		{ID: "d", Peers: 200, Share: 0.25, Seq: 2, Estimate: 800},
	})
	if v, ch := c.Tick(now.Add(3 * time.Second)); ch {
		t.Fatalf("proposed %v on the first tick outside the band (ConfirmFor 1 s)", v)
	}
	if v, ch := c.Tick(now.Add(4 * time.Second)); !ch || v.S != 8 {
		t.Fatalf("median 800 did not propose S = 8: %v %v", v, ch)
	}
}

// Own is the latest own report; Forget drops another superpeer's report
// (a token's new holder stands for it now) but never the peer's own.
func TestOwnAndForget(t *testing.T) {
	c, err := New(Config{Fraction: 0.1}, "a", Value{S: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Own(); ok {
		t.Fatal("own report before any")
	}
	c.Report(t0, 5, 0.5)
	c.Report(t0, 6, 0.5)
	if e, ok := c.Own(); !ok || e.Peers != 6 || e.Seq != 2 || e.ID != "a" {
		t.Fatalf("Own = %+v, %v; want the second report", e, ok)
	}
	c.Merge(t0, Value{S: 2}, []Entry{{ID: "b", Peers: 4, Share: 0.5, Seq: 1}})
	c.Forget("a")
	c.Forget("b")
	c.Forget("nobody")
	if n, k := c.Size(t0); k != 1 || n != 12 {
		t.Fatalf("after Forget: size %v from %d reports, want own 6 for half: 12", n, k)
	}
}

// A report carries an estimate only from a table that holds a quorum (here
// two of S = 4): one superpeer's own load, however large, is no estimate
// of the network a median should take.
func TestReport_EstimateNeedsQuorum(t *testing.T) {
	c, err := New(Config{Fraction: 0.1}, "a", Value{S: 4})
	if err != nil {
		t.Fatal(err)
	}
	estimate := func() float64 {
		t.Helper()
		e, ok := c.Own()
		if !ok {
			t.Fatal("no own report")
		}
		return e.Estimate
	}
	c.Report(t0, 40, 0.25)
	c.Report(t0.Add(time.Second), 40, 0.25) // the table holds its own report only
	if e := estimate(); e != 0 {
		t.Fatalf("estimate %v from one report, want none", e)
	}
	c.Merge(t0.Add(time.Second), Value{S: 4}, []Entry{{ID: "b", Peers: 60, Share: 0.25, Seq: 1}})
	c.Report(t0.Add(2*time.Second), 40, 0.25)
	if e := estimate(); e != 200 {
		t.Fatalf("estimate %v from two reports, want (40 + 60) / 0.5 = 200", e)
	}
}

// A median outside the band does not propose while the peer's own table,
// the latest reports, finds the count inside it (the median trails a
// network whose clients are still attaching), nor when the two are
// outside on opposite sides; both outside on one side do.
func TestTick_MedianAndOwnTableAgree(t *testing.T) {
	cfg := Config{Fraction: 0.01, HoldDown: time.Second, Expire: time.Minute, Confirm: 1, ConfirmFor: time.Nanosecond}
	run := func(own, others float64) (Value, bool) {
		c, err := New(cfg, "a", Value{S: 8})
		if err != nil {
			t.Fatal(err)
		}
		c.Tick(t0)
		// Four groups of a quarter each: the own table sums to 4·load.
		load := int(own / 4)
		c.Report(t0, load, 0.25)
		var es []Entry
		for i, id := range []string{"b", "c", "d", "e"} {
			es = append(es, Entry{ID: id, Peers: load, Share: 0.25, Seq: 1, Estimate: others + float64(i)})
		}
		// Five reports with four shares of a quarter: (5·load)/1.25 = 4·load.
		c.Merge(t0, Value{S: 8}, es)
		c.Tick(t0.Add(2 * time.Second))
		return c.Tick(t0.Add(3 * time.Second))
	}
	if v, ch := run(800, 500); ch {
		t.Fatalf("own table at 800 (S = 8), the others' estimates at 500: proposed %v", v)
	}
	if v, ch := run(1200, 500); ch {
		t.Fatalf("own table at 1200 above the band, the median below it: proposed %v", v)
	}
	if v, ch := run(500, 500); !ch || v.S != 5 {
		t.Fatalf("both at 500: %v %v, want S = 5", v, ch)
	}
}

// With Group, two reports of one group count its share once and its peers
// summed: a second peer that takes itself for the group's superpeer (and
// serves only itself) neither halves the estimate nor makes a quorum.
func TestSize_OneShareAGroup(t *testing.T) {
	group := func(id string, s int) int { return int(id[0]) } // "a1" and "a2" are one group
	for _, grouped := range []bool{false, true} {
		cfg := Config{Fraction: 0.01}
		if grouped {
			cfg.Group = group
		}
		c, err := New(cfg, "a1", Value{S: 2})
		if err != nil {
			t.Fatal(err)
		}
		c.Report(t0, 99, 0.5)
		c.Merge(t0, Value{S: 2}, []Entry{{ID: "a2", Peers: 1, Share: 0.5, Seq: 1}, {ID: "b1", Peers: 100, Share: 0.5, Seq: 1}})
		n, reports := c.Size(t0)
		if grouped && (n != 200 || reports != 2) {
			t.Errorf("grouped: %v from %d groups, want 200 from 2", n, reports)
		}
		if !grouped && (math.Abs(n-200.0/1.5) > 1e-9 || reports != 3) {
			t.Errorf("ungrouped: %v from %d reports, want 133.3 from 3", n, reports)
		}
	}
}
