package repel

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/superpeer-overlay/superpeer/vivaldi"
)

// AttachConfig configures how a client chooses the holder it attaches to
// (Chooser). The live selector and the simulator share it.
type AttachConfig struct {
	// Probe is how many holders, nearest first, the client must have
	// measured before it chooses: it measures the Probe predicted-nearest,
	// and goes on while an unmeasured holder ranks among the first Probe
	// (a measured holder ranks by its RTT, an unmeasured one by its
	// predicted RTT). 0 or negative: none, prediction alone.
	Probe int
	// Switch is how much nearer another holder must be before an attached
	// client leaves its holder for it (e.g. 1.1: 10% nearer).
	Switch float64
	// ProbeEvery spaces the measurements of a client that is attached to a
	// live holder; a client choosing anew (unattached, or its holder gone)
	// measures at once.
	ProbeEvery time.Duration
	// MeasureTTL is how long a measured RTT stands for its holder. A
	// failed measurement stands for ProbeEvery only.
	MeasureTTL time.Duration
	// Explore is how many more holders a client measures at each attach
	// step, after it has asked (Chooser.Explore), beyond the Probe it
	// measures when due: the nearest in the ranking of those it has no
	// measurement of. Over successive steps it comes to know the RTT of
	// the holders the coordinates place further off, so that one the
	// embedding puts far but that is near (a near pair the coordinates get
	// wrong, a host whose coordinate drifted) is found. 0: none.
	Explore int
	// ExploreEvery spaces the steps that explore (0: every step): each
	// exploration is a new connection to a holder, and a holder that every
	// client explores at once is busy with them.
	ExploreEvery time.Duration
	// ExploreFirst lifts ExploreEvery while the client has measured fewer
	// than ExploreFirst of the live holders: a client new to the holders
	// explores at every step until it knows that many, then at
	// ExploreEvery. A near holder the coordinates put far (a pair that
	// breaks the triangle inequality) is found in a few renewals, not in
	// ExploreEvery times its rank. 0: ExploreEvery from the first step.
	ExploreFirst int
	// RegretFactor and RegretMargin bound, on the holder's side, the
	// regret it takes from a client (RegretBound): at most RegretFactor
	// times what the coordinates say the client loses if refused, plus
	// RegretMargin. A client that says more (to displace others from a
	// full holder) is taken at the bound. RegretFactor 0: every regret is
	// taken as said.
	RegretFactor float64
	RegretMargin time.Duration
}

// DefaultAttachConfig measures 3 holders, switches for a 10% nearer one,
// measures an attached client's holders at most every 50 s (five renewals
// of a 30 s attach TTL), trusts a measurement for 10 minutes, explores one
// unmeasured holder at most every 50 s, and takes a client's regret at up
// to the coordinates' estimate and 2 ms (a displacement margin,
// superpeer.DefaultDisplace). Exploring was chosen by the simulator's
// 48-run table and two live 2 000-peer swarms: experiments/README.md,
// "Displaced clients told at once".
func DefaultAttachConfig() AttachConfig {
	return AttachConfig{Probe: 3, Explore: 1, ExploreEvery: 50 * time.Second, Switch: 1.1, ProbeEvery: 50 * time.Second, MeasureTTL: 10 * time.Minute,
		RegretFactor: 1, RegretMargin: 2 * time.Millisecond}
}

// Validate names the first field that makes no sense.
func (c AttachConfig) Validate() error {
	switch {
	case !(c.Switch >= 1) || math.IsInf(c.Switch, 0):
		return fmt.Errorf("repel: attach Switch %v must be ≥ 1", c.Switch)
	case c.ProbeEvery < 0 || c.MeasureTTL < 0:
		return errors.New("repel: attach ProbeEvery and MeasureTTL must be ≥ 0")
	case c.Explore < 0 || c.ExploreEvery < 0 || c.ExploreFirst < 0:
		return fmt.Errorf("repel: attach Explore %d, ExploreEvery %v and ExploreFirst %d must be ≥ 0", c.Explore, c.ExploreEvery, c.ExploreFirst)
	case c.RegretFactor != 0 && !(c.RegretFactor >= 1) || math.IsInf(c.RegretFactor, 0) || c.RegretMargin < 0:
		return fmt.Errorf("repel: attach RegretFactor %v must be 0 or ≥ 1, RegretMargin %v ≥ 0", c.RegretFactor, c.RegretMargin)
	}
	return nil
}

// maxMeasurePerChoice bounds the measurements of one choice, in units of
// Probe: a prediction that is wrong for every holder must not make a
// client measure them all.
const maxMeasurePerChoice = 2

// Candidate is a live holder a client may attach to, with its predicted
// RTT (the distance between the two coordinates, in seconds).
type Candidate struct {
	ID        string
	Predicted float64
}

type measurement struct {
	rtt float64 // seconds; +Inf if the measurement failed
	at  time.Time
}

// Chooser is one client's choice of holder: which holders to measure and in
// which order to ask them to serve it. Pure and not safe for concurrent
// use; the caller does the measuring and the asking:
//
//	for id := ch.Next(now, cur, cands); id != ""; id = ch.Next(now, cur, cands) {
//		ch.Measured(now, id, measure(id))
//	}
//	for _, id := range ch.Order(now, cur, cands) { ask id; stop at the first that accepts }
//	for id := ch.Explore(now, cands); id != ""; id = ch.Explore(now, cands) {
//		ch.Explored(now, id, measure(id))
//	}
//
// A holder ranks by its measured RTT when the client has one younger than
// MeasureTTL, by its predicted RTT otherwise. The client keeps its current
// holder while it is live and within Switch of the first in that ranking,
// so a client that chose a holder for its measured RTT stays with it even
// when the coordinates predict another nearer.
type Chooser struct {
	cfg      AttachConfig
	measured map[string]measurement
	lastRun  time.Time // when the client last measured (zero: never)
	run      int       // measurements in the current choice
	runAt    time.Time

	explored  int       // explorations in the current step
	exploreAt time.Time // the step explored is counted for
}

// NewChooser makes a client's chooser.
func NewChooser(cfg AttachConfig) (*Chooser, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Chooser{cfg: cfg, measured: map[string]measurement{}}, nil
}

// Measured records a measured RTT to holder id (ok false: the measurement
// failed, and the holder ranks last until measured again).
func (c *Chooser) Measured(now time.Time, id string, rtt time.Duration, ok bool) {
	c.record(now, id, rtt, ok)
	if !c.runAt.Equal(now) {
		c.runAt, c.run = now, 0
	}
	c.run++
	c.lastRun = now
}

// Explored records the measurement of a holder Explore gave (ok false: it
// failed), counted toward the step's Explore, not toward the probes.
func (c *Chooser) Explored(now time.Time, id string, rtt time.Duration, ok bool) {
	c.record(now, id, rtt, ok)
	if !c.exploreAt.Equal(now) {
		c.exploreAt, c.explored = now, 0
	}
	c.explored++
}

// record stores a measurement of holder id (+Inf if it failed).
func (c *Chooser) record(now time.Time, id string, rtt time.Duration, ok bool) {
	m := measurement{rtt: max(rtt, 0).Seconds(), at: now}
	if !ok {
		m.rtt = math.Inf(1)
	}
	c.measured[id] = m
}

// Observed records an RTT to holder id sampled for another reason (the
// coordinate exchange a client makes with its holder after attaching): it
// refreshes the measurement without counting as a probe.
func (c *Chooser) Observed(now time.Time, id string, rtt time.Duration) {
	if rtt < 0 {
		return
	}
	c.measured[id] = measurement{rtt: rtt.Seconds(), at: now}
}

// due reports whether holder id's measurement is missing or ProbeEvery
// old: an attached client refreshes its holder's RTT at that pace.
func (c *Chooser) due(now time.Time, id string) bool {
	m, ok := c.measured[id]
	return !ok || now.Sub(m.at) >= c.cfg.ProbeEvery
}

// Forget drops what the client measured (as when its coordinate or network
// changed).
func (c *Chooser) Forget() { clear(c.measured) }

// rtt is holder id's RTT for ranking and whether it was measured.
func (c *Chooser) rtt(now time.Time, cd Candidate) (float64, bool) {
	if m, ok := c.measured[cd.ID]; ok && now.Sub(m.at) < c.cfg.MeasureTTL {
		return m.rtt, true
	}
	return cd.Predicted, false
}

type ranked struct {
	id       string
	d        float64
	measured bool
}

// rank orders the candidates by RTT, measured where known, then by ID.
func (c *Chooser) rank(now time.Time, cands []Candidate) []ranked {
	out := make([]ranked, 0, len(cands))
	for _, cd := range cands {
		d, m := c.rtt(now, cd)
		if math.IsNaN(d) {
			d = math.Inf(1)
		}
		out = append(out, ranked{cd.ID, d, m})
	}
	slices.SortFunc(out, func(a, b ranked) int {
		if x := cmp.Compare(a.d, b.d); x != 0 {
			return x
		}
		return cmp.Compare(a.id, b.id)
	})
	return out
}

// Next is the next holder to measure before choosing, or "" when none is
// due: the first unmeasured holder among the first Probe of the ranking,
// measured only if the client chooses anew (cur is "" or not among cands)
// or last measured ProbeEvery ago or more, and at most 2·Probe per choice.
// It also forgets measurements of holders that are gone or stale (a failed
// one after ProbeEvery).
func (c *Chooser) Next(now time.Time, cur string, cands []Candidate) string {
	live := c.forget(now, cands)
	if c.cfg.Probe <= 0 {
		return ""
	}
	inRun := c.runAt.Equal(now)
	due := cur == "" || !live[cur] || c.lastRun.IsZero() || now.Sub(c.lastRun) >= c.cfg.ProbeEvery || inRun
	if !due || (inRun && c.run >= maxMeasurePerChoice*c.cfg.Probe) {
		return ""
	}
	for i, r := range c.rank(now, cands) {
		if i >= c.cfg.Probe {
			break
		}
		if !r.measured {
			return r.id
		}
	}
	return ""
}

// Explore is the next holder to measure after the client has asked (so
// that no renewal waits for it), or "" when none: the first of the ranking
// it has no measurement of, at most Explore a step (a step is a now), in
// steps ExploreEvery apart (any steps while it has measured fewer than
// ExploreFirst live holders). What it measures ranks the holders at the
// next choice.
func (c *Chooser) Explore(now time.Time, cands []Candidate) string {
	c.forget(now, cands)
	if c.cfg.Explore <= 0 {
		return ""
	}
	rs := c.rank(now, cands)
	switch {
	case c.exploreAt.Equal(now):
		if c.explored >= c.cfg.Explore {
			return ""
		}
	case !c.exploreAt.IsZero() && now.Sub(c.exploreAt) < c.cfg.ExploreEvery && measuredIn(rs) >= c.cfg.ExploreFirst:
		return ""
	}
	for _, r := range rs {
		if !r.measured {
			return r.id
		}
	}
	return ""
}

// measuredIn counts the ranked holders ranked by a measurement.
func measuredIn(rs []ranked) int {
	n := 0
	for _, r := range rs {
		if r.measured {
			n++
		}
	}
	return n
}

// forget drops the measurements of holders that are gone, or older than
// MeasureTTL (a failed one: than ProbeEvery), and returns the live holders.
func (c *Chooser) forget(now time.Time, cands []Candidate) map[string]bool {
	live := make(map[string]bool, len(cands))
	for _, cd := range cands {
		live[cd.ID] = true
	}
	for id, m := range c.measured {
		ttl := c.cfg.MeasureTTL
		if math.IsInf(m.rtt, 1) {
			ttl = min(ttl, c.cfg.ProbeEvery)
		}
		if !live[id] || now.Sub(m.at) >= ttl {
			delete(c.measured, id)
		}
	}
	return live
}

// order is the holders to ask, in order: the current one first while it is
// live and within Switch of the first of the ranking, then the ranking.
func (c *Chooser) order(now time.Time, cur string, cands []Candidate) []string {
	rs := c.Ranked(now, cur, cands)
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.ID
	}
	return out
}

// Choice is a holder in a client's Order with the RTT it ranks by (seconds:
// measured where known, predicted otherwise).
type Choice struct {
	ID       string
	RTT      float64
	Measured bool
}

// Ranked is Order with each holder's RTT.
func (c *Chooser) Ranked(now time.Time, cur string, cands []Candidate) []Choice {
	rs := c.rank(now, cands)
	out := make([]Choice, 0, len(rs))
	curAt := -1
	for i, r := range rs {
		if r.id == cur {
			curAt = i
		}
	}
	if curAt >= 0 && rs[curAt].d <= c.cfg.Switch*rs[0].d {
		out = append(out, Choice{cur, rs[curAt].d, rs[curAt].measured})
	}
	for _, r := range rs {
		if len(out) == 0 || r.id != out[0].ID {
			out = append(out, Choice{r.id, r.d, r.measured})
		}
	}
	return out
}

// Regret is what the client loses if the k-th holder of its order refuses
// it: the next one's RTT minus the k-th's (the attach request's regret, by
// which a full holder with superpeer.WithDisplace keeps the
// clients that lose most without it). It is negative for a client that
// stays with its holder while a nearer one is within Switch: it would gain
// by going, and is the first a full holder lets go. 0 (none said) when the
// next RTT is unknown (NaN); the largest Duration (no other choice) for
// the last holder of the order or when the next measurement failed. The
// holder takes it at most at its RegretBound.
func Regret(order []Choice, k int) time.Duration {
	if k+1 >= len(order) {
		return noOtherChoice
	}
	d := order[k+1].RTT - order[k].RTT
	switch {
	case math.IsNaN(d):
		return 0
	case d >= noOtherChoice.Seconds():
		return noOtherChoice
	case d <= -noOtherChoice.Seconds():
		return -noOtherChoice
	}
	return time.Duration(math.Round(d * float64(time.Second)))
}

// noOtherChoice is the regret of a client with no other holder to ask.
const noOtherChoice = time.Duration(math.MaxInt64)

// RegretBound is the most regret a holder at self takes from a client
// whose request carries the coordinate client, the other live holders
// being at others: RegretFactor times the coordinates' estimate of what
// the client loses if refused, plus RegretMargin. An honest client asks
// the holders nearest first (Ranked), so when it asks this one the next it
// would ask is the nearest of those no nearer: the estimate is the
// predicted RTT to that holder less the predicted RTT to self. A client
// that is truly nearer another holder than predicted says more, within
// the factor and the margin; one that claims to have no other choice (to
// displace the clients of a full holder) is held to it. A client that
// sends no coordinate, or one of other dimensions, is held to RegretMargin.
// No bound (the largest Duration) when RegretFactor is 0, self is not a
// coordinate, or no other holder is predicted as far as self (the client
// has no other choice after this one).
func (c AttachConfig) RegretBound(client, self vivaldi.Coord, others []vivaldi.Coord) time.Duration {
	switch {
	case c.RegretFactor <= 0 || len(self.Vec) == 0:
		return noOtherChoice
	case len(client.Vec) != len(self.Vec):
		return c.RegretMargin
	}
	d := client.DistanceTo(self)
	next := math.Inf(1)
	for _, o := range others {
		if len(o.Vec) != len(client.Vec) {
			continue
		}
		if x := client.DistanceTo(o); x >= d && x < next {
			next = x
		}
	}
	b := c.RegretFactor*(next-d) + c.RegretMargin.Seconds()
	if math.IsNaN(b) || b >= noOtherChoice.Seconds() {
		return noOtherChoice
	}
	return time.Duration(math.Round(b * float64(time.Second)))
}
