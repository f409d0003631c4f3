package sim

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/superpeer-overlay/superpeer/dht"
	"github.com/superpeer-overlay/superpeer/internal/census"
	"github.com/superpeer-overlay/superpeer/superpeer"
)

// GrowthPhase holds the network at N peers for Hold; peers join or leave at
// the start of the phase, spread over Ramp.
type GrowthPhase struct {
	N          int
	Ramp, Hold time.Duration
}

// GrowthOptions configure PrefixGrowth.
type GrowthOptions struct {
	Seed int64
	// Census is the fraction and its dynamics (internal/census defaults
	// where zero).
	Census census.Config
	// Phases is the schedule; the network starts with Phases[0].N peers
	// and S = the census's target for them.
	Phases []GrowthPhase
	// Gossip is how often a superpeer exchanges its table with another
	// superpeer (default 5 s); Renew how soon a client hears its
	// superpeer's value (the attach renewal, default 10 s: TTL/3).
	Gossip, Renew time.Duration
}

// GrowthPoint is the state at the end of a phase.
type GrowthPoint struct {
	N int `json:"n"`
	// Target is f·n; Superpeers the agreed S at the end of the phase, held
	// by every superpeer (Agreed false if they still differ).
	Target     float64 `json:"target"`
	Superpeers int     `json:"superpeers"`
	Agreed     bool    `json:"agreed"`
	// Changes counts the values proposed during the phase; UnitSteps the
	// sum of |ΔS| over them; Reselected the peers whose superpeer key
	// changed with them, and PerUnitStep that over UnitSteps (prefix: one
	// group's members per step, about n/S).
	Changes     int     `json:"changes"`
	UnitSteps   int     `json:"unit_steps"`
	Reselected  int     `json:"reselected"`
	PerUnitStep float64 `json:"reselected_per_unit_step"`
	// SpreadSeconds is the longest time, over the phase's values, from a
	// value's proposal until every peer held it (superpeers by gossip,
	// clients at their next renewal); -1 if one never spread.
	SpreadSeconds float64 `json:"spread_seconds"`
	// MessagesPerPeerSecond is the census exchanges (two messages each)
	// over peers and the phase's duration.
	MessagesPerPeerSecond float64 `json:"messages_per_peer_second"`
}

// GrowthResult is the outcome of PrefixGrowth.
type GrowthResult struct {
	Points []GrowthPoint `json:"points"`
	// MinSuperpeers is the least S any superpeer held at any time.
	MinSuperpeers int `json:"min_superpeers"`
}

// PrefixGrowth runs the census (internal/census, the code the peers run) of
// the prefix method's superpeers as the network grows and shrinks: a
// superpeer for every group of the exact code of the S it holds (the peer
// XOR-closest to the group key, as the DHT answers it), reporting its
// group's members and key share; every Gossip each superpeer exchanges
// tables with another (one hop of prefixHop each way) and ticks its census;
// a new value reaches a group's clients at their next renewal (Renew). When
// the value changes, the groups of the new code that the old one lacked get
// their superpeers, which take the value then; the peers whose superpeer
// key changed are counted as re-selecting. Keys are seeded random 256-bit
// keys (not derived identities), so a million peers fit.
func PrefixGrowth(o GrowthOptions) (GrowthResult, error) {
	if len(o.Phases) == 0 {
		return GrowthResult{}, fmt.Errorf("sim: growth needs phases")
	}
	if o.Gossip <= 0 {
		o.Gossip = 5 * time.Second
	}
	if o.Renew <= 0 {
		o.Renew = 10 * time.Second
	}
	cfg, err := o.Census.Filled()
	if err != nil {
		return GrowthResult{}, err
	}
	g := &growth{o: o, cfg: cfg, loop: &Loop{}, rng: rand.New(rand.NewPCG(uint64(o.Seed), 0x67726f77)), sps: map[dht.Key]*growthSP{}, proposed: -1}
	g.join(o.Phases[0].N)
	s0 := cfg.Target(float64(o.Phases[0].N), 0)
	g.res.MinSuperpeers = s0
	g.agreed = census.Value{S: s0}
	if err := g.reconcile(census.Value{S: s0}); err != nil {
		return GrowthResult{}, err
	}
	start := time.Duration(0)
	for _, ph := range o.Phases {
		g.phase(start, ph)
		start += ph.Ramp + ph.Hold
		g.loop.RunUntil(start)
		g.res.Points = append(g.res.Points, g.point(ph))
	}
	return g.res, nil
}

type growthSP struct {
	group dht.Key // the group key it serves
	c     *census.Census
	gen   int // bumped when it stops, so its pending events die
}

type growth struct {
	o    GrowthOptions
	cfg  census.Config
	loop *Loop
	rng  *rand.Rand
	keys []dht.Key // sorted
	sps  map[dht.Key]*growthSP
	// agreed is the freshest value any superpeer holds; proposed when it
	// first appeared.
	agreed   census.Value
	proposed time.Duration
	spread   float64 // the phase's longest spread (s), -1 if one did not finish
	changes  int
	units    int
	resel    int
	msgs     int
	res      GrowthResult
}

func (g *growth) join(k int) {
	for i := 0; i < k; i++ {
		var key dht.Key
		for j := 0; j < len(key); j += 8 {
			v := g.rng.Uint64()
			for b := 0; b < 8; b++ {
				key[j+b] = byte(v >> (8 * b))
			}
		}
		g.keys = append(g.keys, key)
	}
	sort.Slice(g.keys, func(i, j int) bool { return bytes.Compare(g.keys[i][:], g.keys[j][:]) < 0 })
}

// leave removes k random peers (at least one stays), in one pass.
func (g *growth) leave(k int) {
	k = min(k, len(g.keys)-1)
	gone := map[int]bool{}
	for len(gone) < k {
		gone[g.rng.IntN(len(g.keys))] = true
	}
	kept := g.keys[:0]
	for i, key := range g.keys {
		if !gone[i] {
			kept = append(kept, key)
		}
	}
	g.keys = kept
}

// members is the number of keys in the group with key gk and share sh, and
// the XOR-closest of them to gk (the smallest: gk is the group's prefix
// followed by zeros).
func (g *growth) members(gk dht.Key, share float64) (int, dht.Key, bool) {
	lo := sort.Search(len(g.keys), func(i int) bool { return bytes.Compare(g.keys[i][:], gk[:]) >= 0 })
	// The group's range ends where the prefix ends: gk + share of the space.
	end := groupEnd(gk, share)
	hi := len(g.keys)
	if end != nil {
		hi = sort.Search(len(g.keys), func(i int) bool { return bytes.Compare(g.keys[i][:], end[:]) >= 0 })
	}
	if hi <= lo {
		return 0, dht.Key{}, false
	}
	return hi - lo, g.keys[lo], true
}

// groupEnd is the first key past the group starting at gk with share sh (a
// power of two), or nil at the end of the space.
func groupEnd(gk dht.Key, share float64) *dht.Key {
	bits := int(math.Round(-math.Log2(share)))
	if bits == 0 {
		return nil
	}
	var end dht.Key
	copy(end[:], gk[:])
	// Add 1 at bit position bits-1 (from the top), carrying.
	byteI, bitI := (bits-1)/8, 7-(bits-1)%8
	carry := uint16(1) << bitI
	for i := byteI; i >= 0 && carry > 0; i-- {
		sum := uint16(end[i]) + carry
		end[i] = byte(sum)
		carry = sum >> 8
	}
	if carry > 0 {
		return nil
	}
	return &end
}

// reconcile makes the superpeer set that of the exact code for v: every
// group gets its XOR-closest member as superpeer (holding v), superpeers of
// groups the code no longer has stop.
func (g *growth) reconcile(v census.Value) error {
	scheme, err := superpeer.Exact(v.S)
	if err != nil {
		return err
	}
	want := map[dht.Key]bool{}
	for i := 0; i < scheme.Groups(); i++ {
		gk := scheme.GroupKey(i)
		want[gk] = true
		sp := g.sps[gk]
		if sp == nil {
			c, err := census.New(g.o.Census, hex.EncodeToString(gk[:8]), v)
			if err != nil {
				return err
			}
			sp = &growthSP{group: gk, c: c}
			g.sps[gk] = sp
			g.schedule(sp)
		}
		sp.c.Observe(g.now(), v) // a no-op unless v is fresher
	}
	for gk, sp := range g.sps {
		if !want[gk] {
			sp.gen++
			delete(g.sps, gk)
		}
	}
	return nil
}

// now is the loop's time as a time.Time for the census.
func (g *growth) now() time.Time { return epoch0.Add(g.loop.Now()) }

func (g *growth) schedule(sp *growthSP) {
	gen := sp.gen
	// Spread the superpeers' periods by a seeded phase.
	first := time.Duration(g.rng.Int64N(int64(g.o.Gossip)))
	var tick func()
	tick = func() {
		if sp.gen != gen {
			return
		}
		g.step(sp)
		g.loop.After(g.o.Gossip, tick)
	}
	g.loop.After(first, tick)
}

// step is one period of superpeer sp: report, exchange with a random other
// superpeer, tick.
func (g *growth) step(sp *growthSP) {
	now := g.now()
	v := sp.c.Value()
	scheme, _ := superpeer.Exact(v.S)
	g0 := scheme.Group(sp.group)
	share := scheme.Share(g0)
	if n, _, ok := g.members(sp.group, share); ok && scheme.GroupKey(g0) == sp.group {
		sp.c.Report(now, n, share)
	} else {
		// An empty group has no superpeer, and one whose group the value
		// merged away is about to be a client.
		sp.c.Withdraw()
	}
	// One exchange with a random other superpeer: a hop each way.
	if other := g.pick(sp); other != nil {
		g.msgs += 2
		d, dv := sp.c.Digest(now), sp.c.Value()
		og := other.gen
		g.loop.After(prefixHop, func() {
			if other.gen != og {
				return
			}
			od, ov := other.c.Digest(g.now()), other.c.Value()
			other.c.Merge(g.now(), dv, d)
			g.observe(other)
			sg := sp.gen
			g.loop.After(prefixHop, func() {
				if sp.gen == sg {
					sp.c.Merge(g.now(), ov, od)
					g.observe(sp)
				}
			})
		})
	}
	if _, changed := sp.c.Tick(now); changed {
		g.observe(sp)
	}
}

// pick is a random superpeer other than sp (nil if none).
func (g *growth) pick(sp *growthSP) *growthSP {
	if len(g.sps) < 2 {
		return nil
	}
	scheme, _ := superpeer.Exact(g.agreed.S)
	for try := 0; try < 4; try++ {
		gk := scheme.GroupKey(g.rng.IntN(scheme.Groups()))
		if o := g.sps[gk]; o != nil && o != sp {
			return o
		}
	}
	return nil // this period without an exchange
}

// observe notes sp's value: a fresher one than any seen is a new proposal;
// the superpeer set follows the freshest value, and every superpeer and
// client holding it ends the spread.
func (g *growth) observe(sp *growthSP) {
	v := sp.c.Value()
	if v.S < g.res.MinSuperpeers {
		g.res.MinSuperpeers = v.S
	}
	if !v.Beats(g.agreed) {
		g.checkSpread()
		return
	}
	old := g.agreed
	g.agreed, g.proposed = v, g.loop.Now()
	g.changes++
	g.units += abs(v.S - old.S)
	g.resel += g.moved(old.S, v.S)
	// The superpeers of the new groups learn the value from their old
	// superpeer's clients' renewals and take their place then.
	g.loop.After(g.o.Renew+prefixLookup, func() {
		if g.agreed == v {
			_ = g.reconcile(v)
			g.checkSpread()
		}
	})
}

// moved counts the keys whose superpeer key differs between the codes.
func (g *growth) moved(a, b int) int {
	sa, err1 := superpeer.Exact(a)
	sb, err2 := superpeer.Exact(b)
	if err1 != nil || err2 != nil {
		return 0
	}
	// Groups present in one code and not the other cover exactly the keys
	// that move: count the members of b's groups that a lacks, and of a's
	// groups that b lacks, not twice.
	inA := map[dht.Key]bool{}
	for i := 0; i < sa.Groups(); i++ {
		inA[sa.GroupKey(i)] = true
	}
	inB := map[dht.Key]bool{}
	moved := 0
	for i := 0; i < sb.Groups(); i++ {
		gk := sb.GroupKey(i)
		inB[gk] = true
		if !inA[gk] {
			n, _, _ := g.members(gk, sb.Share(i))
			moved += n
		}
	}
	for i := 0; i < sa.Groups(); i++ {
		gk := sa.GroupKey(i)
		if !inB[gk] {
			n, _, _ := g.members(gk, sa.Share(i))
			moved += n
		}
	}
	return moved
}

// checkSpread ends the current value's spread once every superpeer holds
// it; its clients hold it Renew later.
func (g *growth) checkSpread() {
	if g.proposed < 0 {
		return
	}
	for _, sp := range g.sps {
		if sp.c.Value() != g.agreed {
			return
		}
	}
	s := (g.loop.Now() - g.proposed + g.o.Renew).Seconds()
	g.spread = math.Max(g.spread, s)
	g.proposed = -1
}

func (g *growth) phase(start time.Duration, ph GrowthPhase) {
	g.changes, g.units, g.resel, g.msgs, g.spread = 0, 0, 0, 0, 0
	diff := ph.N - len(g.keys)
	steps := 10
	for i := 0; i < steps; i++ {
		at := start + time.Duration(i)*ph.Ramp/time.Duration(steps)
		k := diff / steps
		if i < abs(diff)%steps {
			if diff > 0 {
				k++
			} else {
				k--
			}
		}
		g.loop.At(at, func() {
			if k > 0 {
				g.join(k)
			} else {
				g.leave(-k)
			}
		})
	}
}

func (g *growth) point(ph GrowthPhase) GrowthPoint {
	agreed := true
	for _, sp := range g.sps {
		if sp.c.Value() != g.agreed {
			agreed = false
		}
	}
	spread := g.spread
	if g.proposed >= 0 && g.changes > 0 {
		spread = -1
	}
	p := GrowthPoint{
		N: len(g.keys), Target: g.cfg.Fraction * float64(len(g.keys)), Superpeers: g.agreed.S, Agreed: agreed,
		Changes: g.changes, UnitSteps: g.units, Reselected: g.resel, SpreadSeconds: spread,
		MessagesPerPeerSecond: float64(g.msgs) / float64(len(g.keys)) / (ph.Ramp + ph.Hold).Seconds(),
	}
	if g.units > 0 {
		p.PerUnitStep = float64(g.resel) / float64(g.units)
	}
	return p
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}
