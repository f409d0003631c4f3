package swarm

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"sync"
	"sync/atomic"
	"time"

	"github.com/superpeer-overlay/superpeer/internal/census"
	"github.com/superpeer-overlay/superpeer/repel"
)

// GrowOptions drive a swarm through network sizes (Grow) while a method
// whose superpeer count follows a fraction of the network runs on it: the
// prefix method (StartPrefix with superpeer.WithFraction) or the token
// method (StartRepel with repel.Config.Fraction).
type GrowOptions struct {
	// Phases are the live sizes in turn. A size above the live count is
	// reached by joining held peers (Config.Hold, JoinLate) in index order,
	// one below it by killing live peers at random; the first phase is
	// usually the live count the swarm starts with.
	Phases []int
	// Fraction is f, the fraction the method follows.
	Fraction float64
	// Census is the band that says when the count is at rest (zero: the
	// defaults of census.Config with Fraction, as WaitCensus).
	Census census.Config
	// Repel is the token method's run; nil when the prefix method runs.
	Repel *RepelRun
	// Ramp spreads each phase's joins or kills over Batches batches, one
	// every Ramp/Batches (a batch that takes longer delays the next;
	// default 30 s, 10 batches).
	Ramp    time.Duration
	Batches int
	// Timeout ends a phase that has not come to rest this long after it
	// started (default 5 min); the phase is then reported as not converged.
	Timeout time.Duration
	// Every is the sampling period (default 2 s).
	Every time.Duration
	// Quiet is how many samples in a row must find the phase at rest to
	// end it (default 2).
	Quiet int
	// Parallel bounds the joins under way at once (default 64: a join
	// waits on a few round trips of the matrix's latencies, not on the
	// machine).
	Parallel int
	// Seed seeds the choice of the peers killed (default the swarm's + 21).
	Seed int64
	// Sampled, if set, is told of every sample as it is taken.
	Sampled func(GrowSample)
	// PhaseDone, if set, is told of every phase as it ends.
	PhaseDone func(GrowPhase)
}

// GrowSample is the swarm at one moment of Grow. Times are the network's
// (Swarm.Elapsed) since Grow started.
type GrowSample struct {
	Seconds float64 `json:"t"`
	Phase   int     `json:"phase"`
	// Live is the live peers, Target f·Live.
	Live   int     `json:"live"`
	Target float64 `json:"target"`
	// S is the count most live peers hold, SMin and SMax the least and
	// most any holds; Agreed, every live peer holds S; AtRest, agreed
	// and f·Live within the census band around S (CensusCount).
	S      int  `json:"s"`
	SMin   int  `json:"s_min"`
	SMax   int  `json:"s_max"`
	Agreed bool `json:"agreed"`
	AtRest bool `json:"at_rest"`
	// Others is the live peers holding another count than S.
	Others int `json:"others"`
	// Converged: the method's own selection has converged (PrefixState
	// or RepelState Converged).
	Converged bool `json:"converged"`
	// Superpeers is the live peers in the superpeer role.
	Superpeers int `json:"superpeers"`
	// Unserved is the live peers neither a superpeer nor attached to a
	// live superpeer that lists them (undecided, unattached, or attached
	// to a dead or demoted one), newcomers included.
	Unserved int `json:"unserved"`
	// Reattached is the peers served by another superpeer than at their
	// last served sample (the new role of a promoted or demoted peer
	// included).
	Reattached int `json:"reattached"`
	// MaxWithoutSeconds is the most time any peer served once has spent
	// unserved since Grow started (summed over the samples that found it
	// so, each counting the period since the one before).
	MaxWithoutSeconds float64 `json:"max_without_seconds"`
	// MsgsPerPeerSec is the messages the live peers sent since the last
	// sample per live peer per second (Messages), and its parts.
	MsgsPerPeerSec float64            `json:"msgs_per_peer_second"`
	MsgsByKind     map[string]float64 `json:"msgs_by_kind,omitempty"`
}

// GrowPhase is one phase of Grow, at its end.
type GrowPhase struct {
	Phase int `json:"phase"`
	// N is the size the phase was to reach, Live the live peers at its end,
	// Target f·Live.
	N      int     `json:"n"`
	Live   int     `json:"live"`
	Target float64 `json:"target"`
	// S, SMin, SMax, Others, Agreed, AtRest as in the last sample
	// (GrowSample).
	S      int  `json:"s"`
	SMin   int  `json:"s_min"`
	SMax   int  `json:"s_max"`
	Others int  `json:"others"`
	Agreed bool `json:"agreed"`
	AtRest bool `json:"at_rest"`
	// Converged: the phase ended at rest with the selection converged,
	// not at its Timeout.
	Converged bool `json:"converged"`
	// Seconds is the phase's length, RampSeconds until its joins or kills
	// were done, RestSeconds until the first of the Quiet samples at rest
	// (0 if it never came to rest).
	Seconds     float64 `json:"seconds"`
	RampSeconds float64 `json:"ramp_seconds"`
	RestSeconds float64 `json:"rest_seconds"`
	// Joined and Killed are the peers that joined or were killed;
	// JoinFailures the joins that failed (the peer stays out).
	Joined       int `json:"joined"`
	Killed       int `json:"killed"`
	JoinFailures int `json:"join_failures"`
	// UnitSteps is the count's changes in the phase, unit steps summed
	// (|ΔS| between samples of the count most peers hold).
	UnitSteps int `json:"unit_steps"`
	// Reattached is the peers served by another superpeer than before
	// (GrowSample.Reattached) in the phase, and ReattachedPerStep that per
	// unit step of S (0 when S did not move).
	Reattached        int     `json:"reattached"`
	ReattachedPerStep float64 `json:"reattached_per_step"`
	// MaxWithoutSeconds is the most time a peer served before spent
	// unserved in the phase, and Without the peers that spent any;
	// MaxFirstSeconds the longest a peer that joined waited to be served
	// the first time (from when it was live), and Unserved the peers
	// unserved at the end of the phase, PeakUnserved the most at a sample.
	MaxWithoutSeconds float64 `json:"max_without_seconds"`
	Without           int     `json:"without"`
	MaxFirstSeconds   float64 `json:"max_first_seconds"`
	Unserved          int     `json:"unserved"`
	PeakUnserved      int     `json:"peak_unserved"`
	// MsgsPerPeerSec is the messages per live peer per second over the
	// phase.
	MsgsPerPeerSec float64 `json:"msgs_per_peer_second"`
	// Events are the token method's events in the phase (repel.EventKind
	// names): "minted", "accepted" (moves), "fenced", "retired",
	// "counted" (counts proposed); those of a peer killed since its last
	// sample are lost.
	Events map[string]uint64 `json:"events,omitempty"`
}

// Growth is what Grow saw: every sample and every phase.
type Growth struct {
	Method  string       `json:"method"`
	Samples []GrowSample `json:"samples"`
	Phases  []GrowPhase  `json:"phases"`
	// MaxWithoutSeconds is the most time any peer served once spent
	// unserved over the whole run.
	MaxWithoutSeconds float64 `json:"max_without_seconds"`
}

// Message kinds of Messages.
const (
	msgDHT = iota
	msgAttach
	msgVivaldi
	msgMethod
	msgKinds
)

var msgKindNames = [msgKinds]string{"dht", "attach", "vivaldi", "method"}

// Messages is what peer i has sent so far, by kind: "dht" (kad-dht's
// requests and raw closest-peer requests), "attach" (attach requests),
// "vivaldi" (coordinate exchanges that gave a sample: the token method's
// piggybacks and holder probes ride on them) and "method" (the token
// method's own frames: direct announcements, moves, surveys). The prefix
// census's table exchanges follow a closest-peer lookup and are not
// counted of their own.
func (s *Swarm) Messages(i int) map[string]uint64 {
	m := s.messages(i)
	out := make(map[string]uint64, msgKinds)
	for k, name := range msgKindNames {
		out[name] = m[k]
	}
	return out
}

func (s *Swarm) messages(i int) [msgKinds]uint64 {
	m, _ := s.counters(i)
	return m
}

// growEvents are the token method's events Grow counts per phase
// (repel.EventKind names): mints, moves taken, fencings, retirements and
// proposed counts.
var growEvents = [...]string{"minted", "accepted", "fenced", "retired", "counted"}

// counters is peer i's messages (Messages) and, running the token method,
// its growEvents.
func (s *Swarm) counters(i int) (m [msgKinds]uint64, ev [len(growEvents)]uint64) {
	st := s.Peers[i].Node.Stats()
	m[msgDHT] = st.KadSent.Load() + st.ClosestSent.Load()
	sel := s.activeSelector(i)
	if sel != nil {
		m[msgAttach] = sel.Attach().Stats.Sent.Load()
	}
	if v := s.viv; v != nil {
		if svc := v.svcs[i]; svc != nil {
			m[msgVivaldi] = svc.Stats().Samples
		}
	}
	if rs, ok := sel.(*repel.Selector); ok {
		st := rs.Stats()
		m[msgMethod] = st["announce_sent"] + st["move_frames_sent"] + st["survey_frames_sent"]
		for k, name := range growEvents {
			ev[k] = st[name]
		}
	}
	return m, ev
}

// Grow drives the swarm through o.Phases while its method runs, sampling
// it every o.Every: a phase first joins or kills peers in o.Batches batches
// over o.Ramp, and ends once o.Quiet samples in a row find the count at rest for
// the live size (CensusCount.AtRest) and the selection converged, or at
// o.Timeout (then reported as not converged, not as an error). Errors are
// for what keeps it from going on: a bad option, no method running, the
// context's end.
func (s *Swarm) Grow(ctx context.Context, o GrowOptions) (*Growth, error) {
	g, err := s.newGrower(o)
	if err != nil {
		return nil, err
	}
	for k, n := range g.o.Phases {
		ph, err := g.phase(ctx, k, n)
		if err != nil {
			return g.res, err
		}
		g.res.Phases = append(g.res.Phases, ph)
		if o.PhaseDone != nil {
			o.PhaseDone(ph)
		}
	}
	return g.res, nil
}

// grower is Grow's state.
type grower struct {
	s      *Swarm
	o      GrowOptions
	cfg    census.Config
	rng    *rand.Rand
	held   []int // the held peers, in the order they join
	start  time.Time
	res    *Growth
	method string

	// Per peer: the superpeer it was last served by (-1: never), whether
	// it is served at the last sample, when it was first seen live, its
	// time unserved since first served (in all and in this phase), its
	// messages at the last sample.
	lastSP    []int
	seen      []time.Time
	without   []time.Duration
	phaseWo   []time.Duration
	firstWait []time.Duration
	msgs      [][msgKinds]uint64
	events    [][len(growEvents)]uint64
	phaseEv   [len(growEvents)]uint64
	last      time.Time
	prevS     int
	// current is the phase under way (the samples' tag).
	current atomic.Int64
}

func (s *Swarm) newGrower(o GrowOptions) (*grower, error) {
	if len(o.Phases) == 0 {
		return nil, errors.New("swarm: Grow: no phases")
	}
	r := s.active
	if r == nil {
		return nil, errors.New("swarm: Grow: no method runs")
	}
	switch {
	case o.Repel != nil && o.Repel.run != r:
		return nil, errors.New("swarm: Grow: the token run given is not the method running")
	case o.Repel == nil && r.m.Name != "prefix":
		return nil, fmt.Errorf("swarm: Grow: method %s runs; Grow follows prefix, or repel given its RepelRun", r.m.Name)
	}
	if o.Census.Fraction == 0 {
		o.Census.Fraction = o.Fraction
	}
	cfg, err := o.Census.Filled()
	if err != nil {
		return nil, fmt.Errorf("swarm: Grow: %w", err)
	}
	if o.Ramp <= 0 {
		o.Ramp = 30 * time.Second
	}
	if o.Batches <= 0 {
		o.Batches = 10
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Minute
	}
	if o.Every <= 0 {
		o.Every = 2 * time.Second
	}
	if o.Quiet <= 0 {
		o.Quiet = 2
	}
	if o.Parallel <= 0 {
		o.Parallel = 64
	}
	if o.Seed == 0 {
		o.Seed = s.cfg.Seed + 21
	}
	g := &grower{s: s, o: o, cfg: cfg, rng: rand.New(rand.NewSource(o.Seed)), res: &Growth{Method: r.m.Name}, method: r.m.Name}
	for i := range s.Peers {
		if s.held[i].Load() && !s.dead[i].Load() {
			g.held = append(g.held, i)
		}
	}
	live, need := len(s.Live()), 0
	for _, n := range o.Phases {
		if n < 1 {
			return nil, fmt.Errorf("swarm: Grow: phase size %d", n)
		}
		need += max(0, n-live)
		live = n
	}
	if need > len(g.held) {
		return nil, fmt.Errorf("swarm: Grow: the phases join %d peers, %d are held back", need, len(g.held))
	}
	n := len(s.Peers)
	g.lastSP, g.seen = make([]int, n), make([]time.Time, n)
	g.without, g.phaseWo, g.firstWait = make([]time.Duration, n), make([]time.Duration, n), make([]time.Duration, n)
	g.msgs = make([][msgKinds]uint64, n)
	g.events = make([][len(growEvents)]uint64, n)
	g.start = time.Now()
	for i := range g.lastSP {
		g.lastSP[i] = -1
		g.firstWait[i] = -1
	}
	// The peers served as it starts count as served before: their first
	// attachment is not Grow's to time.
	st := s.roleState(s.activeSelector, 0)
	for _, i := range s.Live() {
		g.seen[i] = g.start
		g.msgs[i], g.events[i] = s.counters(i)
		g.lastSP[i] = st.Assignment[i]
	}
	g.prevS = s.Census(cfg).S
	g.last = g.start
	return g, nil
}

// phase runs phase k to size n.
func (g *grower) phase(ctx context.Context, k, n int) (GrowPhase, error) {
	s := g.s
	g.current.Store(int64(k))
	start := time.Now()
	ph := GrowPhase{Phase: k, N: n}
	for i := range g.phaseWo {
		g.phaseWo[i] = 0
	}
	g.phaseEv = [len(growEvents)]uint64{}
	firstBefore := append([]time.Duration(nil), g.firstWait...)
	var (
		rampDone = make(chan struct{})
		rampErr  error
		rampAt   time.Time
	)
	go func() {
		defer close(rampDone)
		ph.Joined, ph.Killed, ph.JoinFailures, rampErr = g.ramp(ctx, n)
		rampAt = time.Now()
	}()
	tick := time.NewTicker(s.Wall(g.o.Every))
	defer tick.Stop()
	var (
		ramped bool
		rest   int
		msgs   float64
		msgSec float64
		restAt time.Time
		last   GrowSample
	)
	for {
		select {
		case <-ctx.Done():
			if !ramped {
				<-rampDone
			}
			return ph, ctx.Err()
		case <-rampDone:
			if !ramped {
				ramped = true
				if rampErr != nil {
					return ph, rampErr
				}
				ph.RampSeconds = s.Network(rampAt.Sub(start)).Seconds()
			}
			rampDone = nil
			continue
		case <-tick.C:
		}
		sm, dt := g.sample()
		last = sm
		msgs += sm.MsgsPerPeerSec * dt
		msgSec += dt
		ph.UnitSteps += abs(sm.S - g.prevS)
		g.prevS = sm.S
		ph.Reattached += sm.Reattached
		ph.PeakUnserved = max(ph.PeakUnserved, sm.Unserved)
		if ramped && sm.AtRest && sm.Converged {
			if rest == 0 {
				restAt = time.Now()
			}
			rest++
		} else {
			rest = 0
		}
		done := ramped && rest >= g.o.Quiet
		timedOut := ramped && s.Elapsed(start) >= g.o.Timeout
		if !done && !timedOut {
			continue
		}
		ph.Converged = done
		if done {
			ph.RestSeconds = s.Network(restAt.Sub(start)).Seconds()
		}
		ph.Seconds = s.Elapsed(start).Seconds()
		ph.Live, ph.Target = last.Live, last.Target
		ph.S, ph.SMin, ph.SMax, ph.Others, ph.Agreed, ph.AtRest = last.S, last.SMin, last.SMax, last.Others, last.Agreed, last.AtRest
		ph.Unserved = last.Unserved
		if ph.UnitSteps > 0 {
			ph.ReattachedPerStep = float64(ph.Reattached) / float64(ph.UnitSteps)
		}
		for i, d := range g.phaseWo {
			if d > 0 {
				ph.Without++
				ph.MaxWithoutSeconds = max(ph.MaxWithoutSeconds, d.Seconds())
			}
			if w := g.firstWait[i]; w >= 0 && firstBefore[i] < 0 {
				ph.MaxFirstSeconds = max(ph.MaxFirstSeconds, w.Seconds())
			}
		}
		if msgSec > 0 {
			ph.MsgsPerPeerSec = msgs / msgSec
		}
		if g.o.Repel != nil {
			ph.Events = map[string]uint64{}
			for k, name := range growEvents {
				ph.Events[name] = g.phaseEv[k]
			}
		}
		s.logf("grow: phase %d done: n %d, S %d (f·n %.1f), %s, %d re-attached over %d unit steps", k, ph.Live, ph.S, ph.Target,
			map[bool]string{true: "at rest and converged", false: "NOT converged"}[ph.Converged], ph.Reattached, ph.UnitSteps)
		return ph, nil
	}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// ramp brings the live count to n in o.Batches batches over the ramp.
func (g *grower) ramp(ctx context.Context, n int) (joined, killed, failed int, err error) {
	s := g.s
	start := time.Now()
	delta := n - len(s.Live())
	if delta == 0 {
		return 0, 0, 0, nil
	}
	batches := g.o.Batches
	for b := 0; b < batches; b++ {
		at := start.Add(s.Wall(g.o.Ramp * time.Duration(b) / time.Duration(batches)))
		select {
		case <-ctx.Done():
			return joined, killed, failed, ctx.Err()
		case <-time.After(time.Until(at)):
		}
		want := delta * (b + 1) / batches // the batches' running total
		if delta > 0 {
			todo := want - joined - failed
			batch := g.held[:min(todo, len(g.held))]
			g.held = g.held[len(batch):]
			var mu sync.Mutex
			sem := make(chan struct{}, g.o.Parallel)
			var wg sync.WaitGroup
			for _, i := range batch {
				sem <- struct{}{}
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer func() { <-sem }()
					err := s.JoinLate(ctx, i)
					mu.Lock()
					if err != nil {
						failed++
						s.logf("grow: peer %d did not join: %v", i, err)
					} else {
						joined++
					}
					mu.Unlock()
				}()
			}
			wg.Wait()
			if ctx.Err() != nil {
				return joined, killed, failed, ctx.Err()
			}
			continue
		}
		live := s.Live()
		g.rng.Shuffle(len(live), func(a, b int) { live[a], live[b] = live[b], live[a] })
		victims := live[:min(-want-killed, len(live)-1)]
		s.active.Kill(victims)
		killed += len(victims)
	}
	return joined, killed, failed, nil
}

// sample reads the swarm once, and returns it with the period since the
// last sample (in the network's time, seconds).
func (g *grower) sample() (GrowSample, float64) {
	s := g.s
	now := time.Now()
	dt := s.Network(now.Sub(g.last))
	g.last = now
	live := s.Live()
	c := s.Census(g.cfg)
	sm := GrowSample{
		Seconds: s.Network(now.Sub(g.start)).Seconds(), Phase: int(g.current.Load()),
		Live: c.N, Target: c.Target, S: c.S, SMin: c.Min, SMax: c.Max, Agreed: c.Agreed, AtRest: c.AtRest, Others: c.Others,
	}
	if g.o.Repel != nil {
		sm.Converged = g.o.Repel.State().Converged()
	} else {
		sm.Converged = s.PrefixState().Converged()
	}
	st := s.roleState(s.activeSelector, 0)
	sm.Superpeers = len(st.Superpeers)
	var sent [msgKinds]uint64
	for _, i := range live {
		if g.seen[i].IsZero() {
			g.seen[i] = now
		}
		switch j := st.Assignment[i]; {
		case j >= 0:
			if g.lastSP[i] >= 0 && g.lastSP[i] != j {
				sm.Reattached++
			}
			if g.lastSP[i] < 0 {
				g.firstWait[i] = s.Network(now.Sub(g.seen[i]))
			}
			g.lastSP[i] = j
		default:
			sm.Unserved++
			if g.lastSP[i] >= 0 {
				g.without[i] += dt
				g.phaseWo[i] += dt
			}
		}
		sm.MaxWithoutSeconds = max(sm.MaxWithoutSeconds, g.without[i].Seconds())
		m, ev := s.counters(i)
		for k := range m {
			sent[k] += m[k] - min(m[k], g.msgs[i][k])
		}
		for k := range ev {
			g.phaseEv[k] += ev[k] - min(ev[k], g.events[i][k])
		}
		g.msgs[i], g.events[i] = m, ev
	}
	if secs := dt.Seconds(); secs > 0 && len(live) > 0 {
		sm.MsgsByKind = map[string]float64{}
		for k, x := range sent {
			r := float64(x) / float64(len(live)) / secs
			sm.MsgsByKind[msgKindNames[k]] = r
			sm.MsgsPerPeerSec += r
		}
	}
	g.res.MaxWithoutSeconds = max(g.res.MaxWithoutSeconds, sm.MaxWithoutSeconds)
	g.res.Samples = append(g.res.Samples, sm)
	if g.o.Sampled != nil {
		g.o.Sampled(sm)
	}
	return sm, dt.Seconds()
}
