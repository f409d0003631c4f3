package vivaldi

import (
	"errors"
	"fmt"
	"math"
	"math/rand"
	"sort"
	"time"
)

// The neighbour set. A live peer cannot pick its near neighbours by true
// RTT, as a simulator does: it must first hear of them and measure them.
// Neighbors does what Pyxida (Ledlie, Gardner, Seltzer, NSDI 2007) does:
// every reply carries a few of the replier's neighbours; the caller adds
// them as candidates, measures the promising ones, and keeps the Size peers
// of lowest measured RTT as its near set, which it samples alternately with
// random peers. Neighbors is pure (no libp2p; peers are opaque strings, the
// clock and the randomness injected); Service drives it.

// NearConfig tunes the neighbour table of a Service. Durations are of the injected clock; RTTs are
// seconds, as everywhere in this package.
type NearConfig struct {
	// Size is K, the number of peers of lowest measured RTT kept as near
	// neighbours (16, as the simulator's near set).
	Size int
	// Share is how many neighbours a caller asks for in each reply, and at
	// most how many a reply carries (4; at most 8; 0 asks for
	// none, which is what a peer that predates neighbour gossip does).
	Share int
	// NearFraction is the share of samples taken from the near set (or
	// spent measuring a candidate); the rest go to a random peer. 0.5
	// alternates the two. Near samples place a node precisely among its
	// neighbours, random ones keep the global layout right: Dabek et al.
	// show that near-only neighbour sets distort it.
	NearFraction float64
	// ProbeShare is the share of near samples spent measuring a candidate
	// while one is worth it and the near set is full (0.75); while it is
	// not full every near sample measures a candidate if there is one. The
	// rest keep the near neighbours' RTTs fresh and notice the ones gone.
	// 0.75 was chosen by experiment (on PlanetLab, the protocol's logic
	// without a network: TestNeighbors_PlanetLab): the near sets find more
	// of every peer's true nearest sooner than at 0.5, nearly as fast as
	// at 1, which spends no near sample on the near neighbours while a
	// candidate is worth measuring (figures: experiments/README.md, "How
	// the defaults were chosen").
	ProbeShare float64
	// ProbeSlack: a candidate is worth measuring while its estimated RTT
	// (below) is under ProbeSlack times the worst near neighbour's (1.5:
	// the estimates come from coordinates, whose error on short links is
	// what we are correcting).
	ProbeSlack float64
	// Candidates bounds the candidate pool (64); past it the candidate of
	// highest estimated RTT is forgotten.
	Candidates int
	// Window is how many recent RTT samples of each near neighbour are
	// kept; their least is its RTT estimate (4). Every overhead of a
	// measurement (a queue, a busy scheduler) makes a sample longer, never
	// shorter, so the least of a few is the steadiest estimate of the path.
	Window int
	// MaxFailures consecutive failed samples drop a near neighbour (3).
	MaxFailures int
	// CandidateTTL forgets a candidate not measured within it (2 min).
	CandidateTTL time.Duration
	// Retry is how long a measured peer that is not a near neighbour (not
	// admitted, evicted, or unreachable) is not measured again as a
	// candidate (10 min). The near set only improves, so a peer refused
	// once stays refused unless neighbours leave.
	Retry time.Duration
}

// maxShare bounds the neighbours one reply may carry.
const maxShare = 8

// maxTried bounds the peers Neighbors remembers having measured.
const maxTried = 4096

// DefaultNearConfig is the neighbour set of a Service.
func DefaultNearConfig() NearConfig {
	return NearConfig{
		Size:         16,
		Share:        4,
		NearFraction: 0.5,
		ProbeShare:   0.75,
		ProbeSlack:   1.5,
		Candidates:   64,
		Window:       4,
		MaxFailures:  3,
		CandidateTTL: 2 * time.Minute,
		Retry:        10 * time.Minute,
	}
}

// Validate reports the first field that is out of range.
func (c NearConfig) Validate() error {
	bad := func(field string, v any, want string) error {
		return fmt.Errorf("vivaldi: NearConfig.%s = %v: %s", field, v, want)
	}
	switch {
	case c.Size < 1 || c.Size > 1024:
		return bad("Size", c.Size, "must be in [1, 1024]")
	case c.Share < 0 || c.Share > maxShare:
		return bad("Share", c.Share, fmt.Sprintf("must be in [0, %d]", maxShare))
	case !(c.NearFraction >= 0 && c.NearFraction <= 1):
		return bad("NearFraction", c.NearFraction, "must be in [0, 1]")
	case !(c.ProbeShare >= 0 && c.ProbeShare <= 1):
		return bad("ProbeShare", c.ProbeShare, "must be in [0, 1]")
	case !(c.ProbeSlack >= 1 && c.ProbeSlack <= 100):
		return bad("ProbeSlack", c.ProbeSlack, "must be in [1, 100]")
	case c.Candidates < 1 || c.Candidates > 4096:
		return bad("Candidates", c.Candidates, "must be in [1, 4096]")
	case c.Window < 1 || c.Window > 64:
		return bad("Window", c.Window, "must be in [1, 64]")
	case c.MaxFailures < 1:
		return bad("MaxFailures", c.MaxFailures, "must be ≥ 1")
	case c.CandidateTTL <= 0:
		return bad("CandidateTTL", c.CandidateTTL, "must be > 0")
	case c.Retry < 0:
		return bad("Retry", c.Retry, "must be ≥ 0")
	}
	return nil
}

// kind says why Next chose a peer.
type kind int

const (
	kindNone   kind = iota // nobody to sample
	kindRandom             // a random peer
	kindNear               // a near neighbour
	kindProbe              // a candidate, to measure it
)

func (k kind) String() string {
	switch k {
	case kindRandom:
		return "random"
	case kindNear:
		return "near"
	case kindProbe:
		return "probe"
	}
	return "none"
}

// offered is a peer offered as a possible near neighbour (Offer).
type offered struct {
	ID string
	// Coord is its coordinate as the offerer heard it (zero if unknown).
	Coord Coord
	// RTT is the offerer's measured RTT to it (seconds; 0 if unknown).
	RTT float64
}

// shared is a near neighbour with its RTT estimate (seconds).
type shared struct {
	ID  string
	RTT float64
}

// NearStats counts what the neighbour table did.
type NearStats struct {
	Members    int     // near neighbours now
	Candidates int     // candidates waiting to be measured
	WorstRTT   float64 // the worst near neighbour's RTT estimate (s; 0 if none)
	Offered    uint64  // candidates taken into the pool
	Probes     uint64  // candidates handed out to be measured
	Admitted   uint64  // peers that became near neighbours
	Evicted    uint64  // near neighbours replaced by a nearer peer
	Dropped    uint64  // near neighbours dropped after MaxFailures failures
	Expired    uint64  // candidates forgotten unmeasured
}

type member struct {
	rtts     []float64 // ring of the last Window samples
	next     int
	seq      uint64 // when last handed out by Next (for least-recently-sampled)
	failures int
}

func (m *member) push(rtt float64, window int) {
	if len(m.rtts) < window {
		m.rtts = append(m.rtts, rtt)
		return
	}
	m.rtts[m.next] = rtt
	m.next = (m.next + 1) % window
}

func (m *member) estimate() float64 {
	e := math.Inf(1)
	for _, r := range m.rtts {
		e = min(e, r)
	}
	return e
}

type candidate struct {
	score float64   // estimated RTT to us (s)
	seen  time.Time // last offered
}

// neighbors is a peer's near set and its candidate pool. It is not safe for
// concurrent use: Service guards it with its lock.
type neighbors struct {
	cfg     NearConfig
	now     func() time.Time
	rng     *rand.Rand
	members map[string]*member
	cands   map[string]*candidate
	tried   map[string]time.Time
	credit  float64
	seq     uint64
	stats   NearStats
}

// ErrNearConfig is wrapped by NewService's error for an invalid NearConfig.
var ErrNearConfig = errors.New("vivaldi: invalid near config")

// newNeighbors makes an empty neighbour set; now and rng are its clock and
// randomness (time.Now and a seeded source in a Service).
func newNeighbors(cfg NearConfig, now func() time.Time, rng *rand.Rand) (*neighbors, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNearConfig, err)
	}
	if now == nil || rng == nil {
		return nil, errors.New("vivaldi: newNeighbors needs a clock and a rand source")
	}
	return &neighbors{
		cfg: cfg, now: now, rng: rng,
		members: make(map[string]*member),
		cands:   make(map[string]*candidate),
		tried:   make(map[string]time.Time),
	}, nil
}

// Config is the set's configuration.
func (n *neighbors) Config() NearConfig { return n.cfg }

// Stats returns the set's counters and sizes.
func (n *neighbors) Stats() NearStats {
	s := n.stats
	s.Members, s.Candidates = len(n.members), len(n.cands)
	if w, ok := n.worst(); ok {
		s.WorstRTT = n.members[w].estimate()
	}
	return s
}

// IsMember reports whether id is a near neighbour.
func (n *neighbors) IsMember(id string) bool { _, ok := n.members[id]; return ok }

// RTT is a near neighbour's RTT estimate.
func (n *neighbors) RTT(id string) (float64, bool) {
	m, ok := n.members[id]
	if !ok {
		return 0, false
	}
	return m.estimate(), true
}

// Nearest is up to k near neighbours other than exclude, lowest RTT first.
func (n *neighbors) Nearest(k int, exclude string) []shared {
	out := make([]shared, 0, len(n.members))
	for id, m := range n.members {
		if id != exclude {
			out = append(out, shared{id, m.estimate()})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].RTT != out[j].RTT {
			return out[i].RTT < out[j].RTT
		}
		return out[i].ID < out[j].ID
	})
	if len(out) > k {
		out = out[:max(k, 0)]
	}
	return out
}

// worst is the near neighbour of highest RTT estimate.
func (n *neighbors) worst() (string, bool) {
	var w string
	we := -1.0
	for id, m := range n.members {
		if e := m.estimate(); e > we || (e == we && id > w) {
			w, we = id, e
		}
	}
	return w, we >= 0
}

func (n *neighbors) markTried(id string, now time.Time) {
	if _, ok := n.tried[id]; !ok && len(n.tried) >= maxTried {
		// Forget the oldest (a linear scan, rare: only when full).
		var old string
		var ot time.Time
		for q, t := range n.tried {
			if old == "" || t.Before(ot) {
				old, ot = q, t
			}
		}
		delete(n.tried, old)
	}
	n.tried[id] = now
}

// Observe records a successful sample of id: a near neighbour's RTT is
// updated; any other peer becomes a near neighbour if the set has room or
// its RTT is below the worst neighbour's estimate, which it then replaces.
func (n *neighbors) Observe(id string, rtt float64) {
	if !(rtt > 0) || math.IsInf(rtt, 0) {
		return
	}
	now := n.now()
	delete(n.cands, id)
	if m, ok := n.members[id]; ok {
		m.push(rtt, n.cfg.Window)
		m.failures = 0
		return
	}
	if len(n.members) >= n.cfg.Size {
		w, _ := n.worst()
		if rtt >= n.members[w].estimate() {
			n.markTried(id, now)
			return
		}
		delete(n.members, w)
		n.markTried(w, now)
		n.stats.Evicted++
	}
	m := &member{rtts: make([]float64, 0, n.cfg.Window)}
	m.push(rtt, n.cfg.Window)
	// New neighbours are sampled next: their one sample is the least
	// certain estimate in the set.
	m.seq = 0
	n.members[id] = m
	delete(n.tried, id)
	n.stats.Admitted++
}

// Failed records a failed sample of id. A near neighbour that fails
// MaxFailures times in a row is dropped; a candidate is not measured again
// for Retry.
func (n *neighbors) Failed(id string) {
	now := n.now()
	delete(n.cands, id)
	if m, ok := n.members[id]; ok {
		m.failures++
		if m.failures >= n.cfg.MaxFailures {
			delete(n.members, id)
			n.markTried(id, now)
			n.stats.Dropped++
		}
		return
	}
	n.markTried(id, now)
}

// Forget drops everything known of id (gone for good).
func (n *neighbors) Forget(id string) {
	delete(n.members, id)
	delete(n.cands, id)
	delete(n.tried, id)
}

// estimate is the RTT to a candidate that an offer suggests, in seconds:
// the distance between our coordinate me and its c, and, when the offerer
// measured it (rtt > 0) and we measured the offerer (via > 0), no more than
// via + rtt and no less than |via − rtt| (the triangle inequality, which
// most Internet paths obey). +Inf if nothing is known.
func estimate(me Coord, c Coord, via, rtt float64) float64 {
	e := math.Inf(1)
	if c.Check() == nil && len(c.Vec) == len(me.Vec) {
		e = me.DistanceTo(c)
	}
	if via > 0 && rtt > 0 {
		e = min(e, via+rtt)
		e = max(e, math.Abs(via-rtt))
	}
	return e
}

// Offer adds candidates heard from a peer that we measured at via seconds
// (0 if unknown); me is our coordinate. Near neighbours, peers measured
// within Retry and peers with an empty ID are skipped; a candidate already
// in the pool keeps the lower of its two estimates. When the pool is full a
// candidate replaces the one of highest estimate if its own is lower.
func (n *neighbors) Offer(me Coord, via float64, cs []offered) {
	now := n.now()
	for _, c := range cs {
		if c.ID == "" {
			continue
		}
		if _, ok := n.members[c.ID]; ok {
			continue
		}
		if t, ok := n.tried[c.ID]; ok {
			if now.Sub(t) < n.cfg.Retry {
				continue
			}
			delete(n.tried, c.ID)
		}
		score := estimate(me, c.Coord, via, c.RTT)
		if old, ok := n.cands[c.ID]; ok {
			old.score = min(old.score, score)
			old.seen = now
			continue
		}
		if len(n.cands) >= n.cfg.Candidates {
			n.expire(now)
		}
		if len(n.cands) >= n.cfg.Candidates {
			var w string
			ws := math.Inf(-1)
			for id, x := range n.cands {
				if x.score > ws || (x.score == ws && id > w) {
					w, ws = id, x.score
				}
			}
			if !(score < ws) {
				continue
			}
			delete(n.cands, w)
		}
		n.cands[c.ID] = &candidate{score: score, seen: now}
		n.stats.Offered++
	}
}

func (n *neighbors) expire(now time.Time) {
	for id, c := range n.cands {
		if now.Sub(c.seen) >= n.cfg.CandidateTTL {
			delete(n.cands, id)
			n.stats.Expired++
		}
	}
}

// bestCandidate is the candidate of lowest estimate, if it is worth
// measuring: the set has room, or its estimate is under ProbeSlack times
// the worst neighbour's.
func (n *neighbors) bestCandidate() (string, bool) {
	var b string
	bs := math.Inf(1)
	found := false
	for id, c := range n.cands {
		if !found || c.score < bs || (c.score == bs && id < b) {
			b, bs, found = id, c.score, true
		}
	}
	if !found {
		return "", false
	}
	if len(n.members) < n.cfg.Size {
		return b, true
	}
	w, _ := n.worst()
	return b, bs < n.cfg.ProbeSlack*n.members[w].estimate()
}

// Next chooses the peer to sample next. A NearFraction of the calls are
// near samples: a candidate worth measuring (always while the set has room,
// else with probability ProbeShare), otherwise the near neighbour sampled
// least recently. The others take a uniformly random peer of random (the
// caller's candidates: a routing table, a peer sample). Either falls back
// on the other when it has nobody. A candidate handed out is taken out of
// the pool; report its sample with Observe or Failed.
func (n *neighbors) Next(random []string) (string, kind) {
	id, k, want, tried := n.nextNear()
	if !want {
		return id, k
	}
	return n.nextRandom(random, tried)
}

// nextNear is Next's first half, for a caller that builds the random
// candidates only when they are needed: it takes the near share's credit
// and makes the near pick when one is due. want says that the pick needs
// the random candidates (nextRandom, told whether the near pick was tried
// and found nothing). Next(random) is nextNear and, if wanted,
// nextRandom(random): the same picks and the same draws of n.rng.
func (n *neighbors) nextNear() (id string, k kind, want, tried bool) {
	n.credit += n.cfg.NearFraction
	near := n.credit >= 1-1e-9
	if !near {
		return "", kindNone, true, false
	}
	n.credit--
	if id, k, ok := n.nearPick(); ok {
		return id, k, false, true
	}
	return "", kindNone, true, true
}

// nextRandom is Next's second half: a uniformly random candidate, or with
// none the near pick if it was not tried yet.
func (n *neighbors) nextRandom(random []string, tried bool) (string, kind) {
	if len(random) > 0 {
		return random[n.rng.Intn(len(random))], kindRandom
	}
	if !tried {
		if id, k, ok := n.nearPick(); ok {
			return id, k
		}
	}
	return "", kindNone
}

// nearPick is a candidate worth measuring (while the set is short of its
// size, or for ProbeShare of the picks), else the near neighbour sampled
// least recently.
func (n *neighbors) nearPick() (string, kind, bool) {
	now := n.now()
	n.expire(now)
	if id, ok := n.bestCandidate(); ok && (len(n.members) < n.cfg.Size || n.rng.Float64() < n.cfg.ProbeShare) {
		delete(n.cands, id)
		n.markTried(id, now)
		n.stats.Probes++
		return id, kindProbe, true
	}
	var lru string
	var lm *member
	for id, m := range n.members {
		if lm == nil || m.seq < lm.seq || (m.seq == lm.seq && id < lru) {
			lru, lm = id, m
		}
	}
	if lm != nil {
		n.seq++
		lm.seq = n.seq
		return lru, kindNear, true
	}
	return "", kindNone, false
}

// keyDist is a key at a distance, ordered by distance and then by key
// (before), so that a choice of the nearest does not depend on map order.
type keyDist[K ~string] struct {
	k K
	d float64
}

func (a keyDist[K]) before(b keyDist[K]) bool { return a.d < b.d || (a.d == b.d && a.k < b.k) }

// nearestTo is up to k keys of known whose coordinates lie nearest target,
// nearest first, skipping those skip says to (nil skips none),
// mismatched dimensions and coordinates at no finite distance (NaN or
// infinite components). Ties go to the smaller distance's first key in
// sorted order, so the result does not depend on map order. It runs on
// every reply that shares neighbours, over every peer the service knows,
// so it checks a distance rather than every coordinate (Coord.Check):
// the service keeps only coordinates that passed the wire's checks.
func nearestTo[K ~string](target Coord, known map[K]Coord, k int, skip func(K) bool) []K {
	if k <= 0 || target.Check() != nil {
		return nil
	}
	type kd = keyDist[K]
	before := kd.before
	// The k best so far, in order: k is a handful and known may hold
	// thousands, so an insertion into k beats sorting them all.
	all := make([]kd, 0, k)
	for id, c := range known {
		if len(c.Vec) != len(target.Vec) || (skip != nil && skip(id)) {
			continue
		}
		x := kd{id, target.DistanceTo(c)}
		if math.IsNaN(x.d) || math.IsInf(x.d, 0) {
			continue
		}
		if len(all) == k && !before(x, all[k-1]) {
			continue
		}
		if len(all) < k {
			all = append(all, x)
		} else {
			all[k-1] = x
		}
		for i := len(all) - 1; i > 0 && before(all[i], all[i-1]); i-- {
			all[i], all[i-1] = all[i-1], all[i]
		}
	}
	out := make([]K, len(all))
	for i, x := range all {
		out[i] = x.k
	}
	return out
}

// shareFor chooses up to k peers to offer asker in a reply: half of them
// (rounded up) n's near neighbours of lowest measured RTT — an asker near
// us is near them too — then the peers of known whose coordinates lie
// nearest askerCoord, which is how an asker far from us hears of peers near
// it, then more near neighbours if that left room. Never asker or self, no
// repeats. RTT is n's estimate for its near neighbours and 0 for the others.
func shareFor[K ~string](n *neighbors, self, asker K, askerCoord Coord, known map[K]Coord, k int) []shared {
	if k <= 0 {
		return nil
	}
	var near []shared
	for _, s := range n.Nearest(k+1, string(asker)) {
		if s.ID != string(self) {
			near = append(near, s)
		}
	}
	take := min((k+1)/2, len(near))
	out := append([]shared(nil), near[:take]...)
	near = near[take:]
	picked := make(map[string]bool, k)
	for _, s := range out {
		picked[s.ID] = true
	}
	more := nearestTo(askerCoord, known, k-len(out), func(id K) bool {
		return id == asker || id == self || picked[string(id)]
	})
	for _, id := range more {
		rtt, _ := n.RTT(string(id))
		out = append(out, shared{ID: string(id), RTT: rtt})
		picked[string(id)] = true
	}
	for _, s := range near {
		if len(out) >= k {
			break
		}
		if !picked[s.ID] {
			out = append(out, s)
		}
	}
	return out
}
