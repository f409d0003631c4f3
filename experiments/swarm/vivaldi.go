package swarm

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/superpeer-overlay/superpeer/experiments/latency"
	"github.com/superpeer-overlay/superpeer/experiments/metrics"
	"github.com/superpeer-overlay/superpeer/experiments/vivaldieval"
	"github.com/superpeer-overlay/superpeer/internal/stall"
	"github.com/superpeer-overlay/superpeer/vivaldi"
)

// VivaldiOptions configure the coordinate service on every peer of a swarm.
type VivaldiOptions struct {
	// Interval is how often each peer starts a sample (default 300 ms,
	// jittered over [½, 1½] of it), whether or not its last one has been
	// answered.
	Interval time.Duration
	// Random is how many random swarm peers each peer may sample besides
	// its routing table (default 16): a fixed peer sample drawn at start,
	// as a peer-sampling service would give it.
	Random int
	// MaxInFlight bounds each peer's samples awaiting their reply (default
	// 16: enough for PlanetLab's longest RTTs at a 40 ms interval).
	MaxInFlight int
	// Seed seeds the peer samples and the services (default the swarm's).
	Seed int64
	// Config is the model (default vivaldi.DefaultConfig()).
	Config *vivaldi.Config
	// Near is the neighbour set (default vivaldi.DefaultNearConfig()).
	Near *vivaldi.NearConfig
	// Stall, if positive, discards every sample timed across a stall of
	// this process longer than Stall of the network's time (a wake-up of
	// an internal/stall watch that late; vivaldi.WithStallCheck): on
	// mocknet the links' delays are this process's timers, and a
	// collector's pause or a CPU behind its goroutines adds itself to
	// every exchange in flight. The repel selector asks a discarded
	// exchange again. 0: every sample is used.
	Stall time.Duration
	// Tidy has the services keep down the connections their sampling
	// opens (vivaldi.WithTidyConns); by default they leave them to the
	// connection managers.
	Tidy bool
}

// stallTick is how often the stall watch wakes, on the clock.
const stallTick = time.Millisecond

// VivaldiWait says when the coordinates are good enough: the live median
// relative error passes Bound, or it has not improved by MinImprove
// (relative) over the best seen for Patience polls in a row.
type VivaldiWait struct {
	// Bound stops the wait once the median is below it (0: no bound).
	Bound float64
	// Poll is how often the error is measured (default 1 s of the
	// network's time).
	Poll time.Duration
	// Patience is how many polls without improvement end the wait
	// (default 5).
	Patience int
	// MinImprove is the relative drop of the median that counts as an
	// improvement (default 0.02).
	MinImprove float64
	// PatienceSamples is how many samples a peer must also have taken
	// since the last improvement before the wait ends on a plateau (0:
	// polls alone): the error falls with samples, not seconds, and a large
	// swarm samples less often (VivaldiWarmInterval).
	PatienceSamples float64
}

// VivaldiSummary is the `vivaldi` block of the swarm report: the live
// coordinates' relative error against the matrix, over all pairs of live
// peers.
type VivaldiSummary struct {
	Median float64 `json:"median"`
	P90    float64 `json:"p90"`
	// NearMedian is the median relative error over the tenth of all pairs
	// of live peers with the lowest RTT; NearestExcessMs the mean, over
	// live peers, of how much farther (true RTT, ms) the peer its
	// coordinates predict nearest is than its true nearest. Both say how
	// well the coordinates know what is near, which is what choosing a
	// superpeer needs.
	NearMedian      float64 `json:"near_median"`
	NearestExcessMs float64 `json:"nearest_excess_ms"`
	// Seconds is how long the coordinates had run by then (since
	// StartVivaldi, in the network's time); Samples is the RTT samples per
	// peer taken by then.
	Seconds float64 `json:"seconds"`
	Samples float64 `json:"samples_per_peer"`
	// Stopped says why the wait ended: "bound" or "plateau".
	Stopped string `json:"stopped"`
	// RTTExcessMs is how much longer than the matrix RTT the latest
	// samples measured (median, p90; VivaldiRun.RTTExcess).
	RTTExcessMs [2]float64 `json:"rtt_excess_ms"`
	// Stalls is what the stall check had done by then (nil: off).
	Stalls *Stalls `json:"stalls,omitempty"`
}

// VivaldiRun is a vivaldi.Service on every peer of a swarm, each sampling
// on its own timer: alternately a near neighbour (or a candidate it heard
// of in a reply, to measure it) and a random candidate. SetInterval slows
// them down once the coordinates are good: hundreds of in-process peers
// sampling every few hundred ms cost more CPU than the method that uses the
// coordinates.
type VivaldiRun struct {
	s      *Swarm
	opts   VivaldiOptions // defaults filled
	svcs   []*vivaldi.Service
	start  time.Time
	dead   []bool
	excess excessRing
	// stalledExcess is excess's for the samples the stall check
	// discarded (Stalls).
	stalledExcess excessRing
	// interval is every peer's sampling interval now (SetInterval), in the
	// network's time: a peer joining late samples at it.
	interval atomic.Int64
	closed   atomic.Bool
	// watch is the stall watch samples are checked against (nil: Stall 0);
	// watched when it started, and runtime0 the runtime's counters then.
	watch    *stall.Watch
	watched  time.Time
	runtime0 stall.RuntimeReading
}

// excessRing keeps the last samples' excess over the true RTT (measured
// minus the matrix's, ms): how much the machine adds to what the peers
// measure.
type excessRing struct {
	mu   sync.Mutex
	ms   []float64
	next int
}

// excessWindow is how many of the latest samples RTTExcess looks at.
const excessWindow = 4096

func (r *excessRing) add(ms float64) {
	r.mu.Lock()
	if len(r.ms) < excessWindow {
		r.ms = append(r.ms, ms)
	} else {
		r.ms[r.next] = ms
		r.next = (r.next + 1) % excessWindow
	}
	r.mu.Unlock()
}

// RTTExcess is the median and p90 of how much longer than the matrix RTT
// the peers' last samples (up to 4096, every Vivaldi exchange: the
// service's own and the selectors') measured, in ms, and how many samples
// that is. A sample carries about a millisecond of in-process overhead; a
// machine that cannot keep up with the swarm adds its queueing delay to
// every sample, the coordinates stretch, and so do the selection's RTT
// figures.
func (v *VivaldiRun) RTTExcess() (median, p90 float64, n int) {
	return v.excess.percentiles()
}

// percentiles is the median and p90 of the ring and how many it holds.
func (r *excessRing) percentiles() (median, p90 float64, n int) {
	r.mu.Lock()
	xs := append([]float64(nil), r.ms...)
	r.mu.Unlock()
	if len(xs) == 0 {
		return 0, 0, 0
	}
	sort.Float64s(xs)
	return xs[len(xs)/2], xs[len(xs)*9/10], len(xs)
}

// StartVivaldi starts the coordinate service on every peer that is in the
// overlay. Each samples from its DHT routing table and a fixed random sample
// of the swarm, and from the near neighbours it finds.
func (s *Swarm) StartVivaldi(opts VivaldiOptions) (*VivaldiRun, error) {
	if opts.Interval == 0 {
		opts.Interval = 300 * time.Millisecond
	}
	if opts.Random == 0 {
		opts.Random = 16
	}
	if opts.MaxInFlight == 0 {
		opts.MaxInFlight = 16
	}
	if opts.Seed == 0 {
		opts.Seed = s.cfg.Seed + 7
	}
	if opts.Random < 0 || opts.Interval < 0 || opts.MaxInFlight < 0 || opts.Stall < 0 {
		return nil, fmt.Errorf("swarm: vivaldi Random %d / Interval %v / MaxInFlight %d / Stall %v must not be negative", opts.Random, opts.Interval, opts.MaxInFlight, opts.Stall)
	}
	rng := rand.New(rand.NewSource(opts.Seed))
	v := &VivaldiRun{s: s, opts: opts, svcs: make([]*vivaldi.Service, len(s.Peers)), dead: make([]bool, len(s.Peers))}
	if opts.Stall > 0 {
		w, err := stall.New(stallTick, s.Wall(opts.Stall))
		if err != nil {
			return nil, err
		}
		v.watch, v.watched, v.runtime0 = w, time.Now(), stall.ReadRuntime()
	}
	v.interval.Store(int64(opts.Interval))
	live := s.Live()
	for _, i := range live {
		svc, err := v.newService(i, live, rng, opts.Interval)
		if err != nil {
			v.Close()
			return nil, err
		}
		v.svcs[i] = svc
	}
	v.start = time.Now()
	s.viv = v
	return v, nil
}

// newService starts peer i's service: it samples its routing table and
// Random peers drawn from live with rng, every interval (in the network's
// time).
func (v *VivaldiRun) newService(i int, live []int, rng *rand.Rand, interval time.Duration) (*vivaldi.Service, error) {
	s, opts := v.s, v.opts
	p := s.Peers[i]
	random := make([]peer.ID, 0, opts.Random)
	for k := 0; k < opts.Random && len(live) > 1; k++ {
		j := live[rng.Intn(len(live))]
		if j != i {
			random = append(random, s.Peers[j].ID)
		}
	}
	node := p.Node
	source := func() []peer.ID {
		return append(node.RoutingTable().ListPeers(), random...)
	}
	// observe records each sample's excess over the matrix RTT in r.
	observe := func(r *excessRing) func(peer.ID, time.Duration) {
		return func(q peer.ID, rtt time.Duration) {
			if j := s.Index(q); j >= 0 {
				r.add(float64(rtt)/float64(time.Millisecond) - s.RTT(i, j))
			}
		}
	}
	vo := []vivaldi.Option{
		vivaldi.WithInterval(s.Wall(interval)), vivaldi.WithPeerSource(source),
		vivaldi.WithTimeScale(s.Dilation()), vivaldi.WithTimeout(min(s.Wall(vivaldiTimeout), vivaldi.MaxRTT)),
		vivaldi.WithMaxInFlight(opts.MaxInFlight), vivaldi.WithSeed(rng.Int63()),
		vivaldi.WithObserver(observe(&v.excess)), vivaldi.WithTidyConns(opts.Tidy),
	}
	if opts.Config != nil {
		vo = append(vo, vivaldi.WithConfig(*opts.Config))
	}
	if opts.Near != nil {
		vo = append(vo, vivaldi.WithNearConfig(*opts.Near))
	}
	if v.watch != nil {
		vo = append(vo, vivaldi.WithStallCheck(v.watch.Stalled), vivaldi.WithStalledObserver(observe(&v.stalledExcess)))
	}
	svc, err := vivaldi.NewService(p.Host, vo...)
	if err != nil {
		return nil, fmt.Errorf("swarm: peer %d: %w", i, err)
	}
	return svc, nil
}

// join starts the service of a peer joining late (Swarm.JoinLate), unless
// it has one or the run is closed: its random sample drawn from the peers
// live now, its seed from the run's and its index. Its coordinate warms up
// as the others' did: while they sample slower than StartVivaldi's
// interval (SetInterval, WarmUp), it samples at that interval for
// joinWarmSamples of them, then at theirs.
func (v *VivaldiRun) join(i int) error {
	if v.svcs[i] != nil || v.closed.Load() {
		return nil
	}
	rng := rand.New(rand.NewSource(v.opts.Seed*1_000_003 + int64(i) + 1))
	svc, err := v.newService(i, v.s.Live(), rng, v.opts.Interval)
	if err != nil {
		return err
	}
	v.svcs[i] = svc
	if cur := time.Duration(v.interval.Load()); cur > v.opts.Interval {
		time.AfterFunc(v.s.Wall(joinWarmSamples*v.opts.Interval), func() {
			svc.SetInterval(v.s.Wall(time.Duration(v.interval.Load())))
		})
	}
	return nil
}

// joinWarmSamples is how many samples a late joiner takes at the warm-up
// interval: about what the swarm's coordinates took to reach a median
// error of 0.12 (45 a peer at 200 peers; see the README).
const joinWarmSamples = 40

// vivaldiTimeout is how long a swarm peer's exchange may take, in the
// network's time (vivaldi's default), but at most the longest RTT the
// model takes on the clock.
const vivaldiTimeout = 5 * time.Second

// SetInterval changes how often every peer samples (from its next sample),
// in the network's time.
func (v *VivaldiRun) SetInterval(d time.Duration) {
	if d > 0 {
		v.interval.Store(int64(d))
	}
	d = v.s.Wall(d)
	for i, svc := range v.svcs {
		if svc != nil && !v.dead[i] {
			svc.SetInterval(d)
		}
	}
}

// Picks sums, over the live peers' services, the peers they chose to
// sample by why (near neighbours, candidates probed, random peers), the
// samples that dialled by why (callers: the method's own), and what became
// of the connections probes opened (vivaldi.WithTidyConns).
type Picks struct {
	Near        uint64 `json:"near"`
	Probes      uint64 `json:"probes"`
	Random      uint64 `json:"random"`
	NearDials   uint64 `json:"near_dials"`
	ProbeDials  uint64 `json:"probe_dials"`
	RandomDials uint64 `json:"random_dials"`
	CallerDials uint64 `json:"caller_dials"`
	Closed      uint64 `json:"probe_conns_closed"`
	KeptWanted  uint64 `json:"probe_conns_kept_wanted"`
	KeptBusy    uint64 `json:"probe_conns_kept_busy"`
}

func (p *Picks) fields() []*uint64 {
	return []*uint64{&p.Near, &p.Probes, &p.Random, &p.NearDials, &p.ProbeDials, &p.RandomDials, &p.CallerDials, &p.Closed, &p.KeptWanted, &p.KeptBusy}
}

// Sub is p less q, field by field.
func (p Picks) Sub(q Picks) Picks {
	qf := q.fields()
	for i, f := range p.fields() {
		*f -= *qf[i]
	}
	return p
}

// Picks reads every live service's counters.
func (v *VivaldiRun) Picks() Picks {
	var p Picks
	pf := p.fields()
	for i, svc := range v.svcs {
		if svc != nil && !v.dead[i] {
			st := svc.Stats()
			for k, x := range []uint64{st.NearSamples, st.Probes, st.RandomSamples, st.NearDials, st.ProbeDials, st.RandomDials, st.CallerDials,
				st.ProbeConnsClosed, st.ProbeConnsKeptWanted, st.ProbeConnsKeptBusy} {
				*pf[k] += x
			}
		}
	}
	return p
}

// Service is peer i's coordinate service (nil if it has none).
func (v *VivaldiRun) Service(i int) *vivaldi.Service { return v.svcs[i] }

// Coord is peer i's current coordinate (zero if it runs no service).
func (v *VivaldiRun) Coord(i int) vivaldi.Coord {
	if v.svcs[i] == nil || v.dead[i] {
		return vivaldi.Coord{}
	}
	return v.svcs[i].Coordinate()
}

// Error is the median and p90 relative error of the live peers'
// coordinates against the swarm's RTTs, over all pairs of live peers.
func (v *VivaldiRun) Error() (median, p90 float64) {
	l := v.s.liveSpace()
	coords := make([]vivaldi.Coord, 0, l.Len())
	for _, i := range l.idx {
		coords = append(coords, v.Coord(i))
	}
	return vivaldieval.LiveError(coords, l)
}

// NearError is how well the live peers' coordinates know what is near
// (NearAccuracy over the live peers).
func (v *VivaldiRun) NearError() (nearMedian, excessMs float64) {
	l := v.s.liveSpace()
	coords := make([]vivaldi.Coord, 0, l.Len())
	for _, i := range l.idx {
		coords = append(coords, v.Coord(i))
	}
	return NearAccuracy(l, coords)
}

// NearAccuracy is how well coords (seconds; coords[i] is peer i's) know
// what is near in rtt (ms): the median relative error over the tenth of all
// pairs with the lowest RTT, and the mean excess RTT (ms) of each peer's
// predicted-nearest peer over its true nearest.
func NearAccuracy(rtt latency.RTTs, coords []vivaldi.Coord) (nearMedian, excessMs float64) {
	n := rtt.Len()
	if n < 2 {
		return 0, 0
	}
	var all []float64
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			all = append(all, rtt.RTT(i, j))
		}
	}
	sort.Float64s(all)
	cut := all[len(all)/10]
	var errs []float64
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			if d := rtt.RTT(i, j); d > 0 && d <= cut {
				errs = append(errs, math.Abs(coords[i].DistanceTo(coords[j])*1000-d)/d)
			}
		}
	}
	for i := 0; i < n; i++ {
		best, pred, pd := math.Inf(1), -1, math.Inf(1)
		for j := 0; j < n; j++ {
			if j == i {
				continue
			}
			best = min(best, rtt.RTT(i, j))
			if d := coords[i].DistanceTo(coords[j]); d < pd {
				pred, pd = j, d
			}
		}
		excessMs += (rtt.RTT(i, pred) - best) / float64(n)
	}
	if len(errs) == 0 {
		return 0, excessMs
	}
	return metrics.Percentiles(errs, 0.5)[0], excessMs
}

// Samples is the mean number of RTT samples per live peer so far.
func (v *VivaldiRun) Samples() float64 {
	live := v.s.Live()
	var total uint64
	for _, i := range live {
		if v.svcs[i] != nil && !v.dead[i] {
			total += v.svcs[i].Stats().Samples
		}
	}
	return float64(total) / float64(max(len(live), 1))
}

// Wait polls the live error until it passes w.Bound or stops improving, and
// reports it.
func (v *VivaldiRun) Wait(ctx context.Context, w VivaldiWait) (VivaldiSummary, error) {
	if w.Poll == 0 {
		w.Poll = time.Second
	}
	if w.Patience == 0 {
		w.Patience = 5
	}
	if w.MinImprove == 0 {
		w.MinImprove = 0.02
	}
	tick := time.NewTicker(v.s.Wall(w.Poll))
	defer tick.Stop()
	best, stale, bestAt := 0.0, 0, 0.0
	for first := true; ; first = false {
		med, p90 := v.Error()
		v.s.progress("vivaldi", int(100*min(1, max(0, 1-med))), 100)
		sum := VivaldiSummary{Median: med, P90: p90, Seconds: v.s.Elapsed(v.start).Seconds(), Samples: v.Samples()}
		sum.RTTExcessMs[0], sum.RTTExcessMs[1], _ = v.RTTExcess()
		switch {
		case w.Bound > 0 && med < w.Bound:
			sum.Stopped = "bound"
			sum.NearMedian, sum.NearestExcessMs = v.NearError()
			sum.Stalls = v.Stalls()
			return sum, nil
		case first || med < best*(1-w.MinImprove):
			best, stale, bestAt = med, 0, sum.Samples
		default:
			stale++
			if stale >= w.Patience && sum.Samples-bestAt >= w.PatienceSamples {
				sum.Stopped = "plateau"
				sum.NearMedian, sum.NearestExcessMs = v.NearError()
				sum.Stalls = v.Stalls()
				return sum, nil
			}
		}
		select {
		case <-ctx.Done():
			return sum, fmt.Errorf("swarm: vivaldi median %.3f (p90 %.3f): %w", med, p90, ctx.Err())
		case <-tick.C:
		}
	}
}

// VivaldiWarmInterval is how often each of n peers samples while the
// coordinates warm up (what `peer swarm` uses unless told): 150 ms up to
// 200 peers (at most 1 333 samples a second, which 200 peers take with
// their samples within 3 ms of the matrix), else 300 ms or n × 1.25 ms,
// at most 800 a second (490 peers at 1 333 a second stopped improving
// short of the bound; experiments/README.md § the default run).
func VivaldiWarmInterval(n int) time.Duration {
	if n <= 200 {
		return 150 * time.Millisecond
	}
	return max(300*time.Millisecond, time.Duration(n)*1250*time.Microsecond)
}

// StallFor is VivaldiOptions.Stall's default for a swarm dilated by f (what
// `peer swarm --stall` and the live growth swarm use unless told):
// DilatedStall when f > 1, else 0. A dilated run is for figures of the
// network, so the machine's stalls are kept out of its samples; why not
// undilated: experiments/README.md, "Samples timed across a stall".
func StallFor(f float64) time.Duration {
	if f > 1 {
		return DilatedStall
	}
	return 0
}

// DilatedStall is StallFor's threshold, chosen by the 490-peer runs of
// experiments/README.md, "Samples timed across a stall" (a shorter one
// counts the ordinary jitter of the swarm's goroutines as stalls and
// starves the warm-up).
const DilatedStall = 5 * time.Millisecond

// VivaldiBoundFor is the median relative error peer swarm's warm-up waits
// for with n peers (--vivaldi-bound unless given): 0.12 below 2 000 peers,
// 0.10 from 2 000 on, where coordinates of 0.12 put tokens in the wrong
// regions (how it was chosen: experiments/README.md, repel-coords and
// "Live repel swarms at 2 000 peers on better coordinates").
func VivaldiBoundFor(n int) float64 {
	if n >= 2000 {
		return 0.10
	}
	return 0.12
}

// WarmPatienceSamples is how many samples a peer takes without the error
// improving before WarmUp gives up on the bound: what ten polls gave 490
// peers at VivaldiWarmInterval (612 ms); at 2 000 peers (2.5 s) ten polls
// were four samples, and the wait ended at a median error of 0.39 after
// 10.6 samples a peer (experiments/README.md, "Live repel swarms at 2 000
// peers").
const WarmPatienceSamples = 16

// VivaldiSlowInterval is how often each peer samples once the coordinates
// are good (WarmUp), unless told otherwise: the selection gets the machine.
const VivaldiSlowInterval = 2 * time.Second

// WarmUp waits until the live median error is under bound or stops
// improving (ten polls, and WarmPatienceSamples samples a peer, without),
// then slows every peer to a sample every after (0: VivaldiSlowInterval):
// how `peer swarm` readies the coordinates before a method starts. With
// the repel method's Piggyback dissemination, after also sets how often
// news of the tokens travels.
func (v *VivaldiRun) WarmUp(ctx context.Context, bound float64, after time.Duration) (VivaldiSummary, error) {
	if after < 0 {
		return VivaldiSummary{}, fmt.Errorf("swarm: sampling interval after the warm-up %v is negative", after)
	}
	if after == 0 {
		after = VivaldiSlowInterval
	}
	vs, err := v.Wait(ctx, VivaldiWait{Bound: bound, Patience: 10, PatienceSamples: WarmPatienceSamples})
	if err != nil {
		return vs, err
	}
	v.SetInterval(after)
	return vs, nil
}

// Summary is the current error, without waiting.
func (v *VivaldiRun) Summary() VivaldiSummary {
	med, p90 := v.Error()
	sum := VivaldiSummary{Median: med, P90: p90, Seconds: v.s.Elapsed(v.start).Seconds(), Samples: v.Samples()}
	sum.NearMedian, sum.NearestExcessMs = v.NearError()
	return sum
}

// Kill stops the services of peers about to be killed (call before
// Swarm.Kill).
func (v *VivaldiRun) Kill(idx []int) {
	for _, i := range idx {
		if v.svcs[i] != nil && !v.dead[i] {
			v.dead[i] = true
			_ = v.svcs[i].Close()
		}
	}
}

// Close stops every service.
func (v *VivaldiRun) Close() {
	v.closed.Store(true)
	if v.s.viv == v {
		v.s.viv = nil
	}
	for i, svc := range v.svcs {
		if svc != nil && !v.dead[i] {
			v.dead[i] = true
			_ = svc.Close()
		}
	}
	if v.watch != nil {
		v.watch.Close()
	}
}

// rescale makes the running services follow the swarm's dilation now
// (Swarm.Dilate): their time scale and their sampling interval.
func (v *VivaldiRun) rescale() error {
	f := v.s.Dilation()
	for i, svc := range v.svcs {
		if svc != nil && !v.dead[i] {
			if err := svc.SetTimeScale(f); err != nil {
				return fmt.Errorf("swarm: peer %d: %w", i, err)
			}
		}
	}
	v.SetInterval(time.Duration(v.interval.Load()))
	if v.watch != nil {
		v.watch.SetThreshold(v.s.Wall(v.opts.Stall))
	}
	return nil
}

// Stalls is what the stall check did (Stall): nil when it is off.
type Stalls struct {
	ThresholdMs float64 `json:"threshold_ms"` // Stall, in the network's time
	// Discarded is the samples discarded for a stall, of Samples taken
	// (discarded or not) by every peer's service since it started.
	Discarded uint64 `json:"samples_discarded"`
	Samples   uint64 `json:"samples"`
	// Ticks and Late are the watch's wake-ups and those late by more than
	// the threshold; WorstMs the largest delay of one (on the clock).
	Ticks   uint64  `json:"watch_ticks"`
	Late    uint64  `json:"watch_late"`
	WorstMs float64 `json:"watch_worst_ms"`
	// StalledShare is the late wake-ups' delays summed, over the clock
	// time the watch has run: the share of the run spent stalled.
	StalledShare float64 `json:"stalled_share"`
	// Runtime is the Go runtime's account of the same span (since the
	// coordinates started): the collector's CPU and pauses, and how long
	// runnable goroutines waited — what the stalls were made of.
	Runtime stall.Runtime `json:"runtime"`
	// DiscardedExcessMs is how much longer than the matrix RTT the last
	// discarded samples (up to 4096) measured: median and p90, ms of the
	// network's time — what they would have added had they been used.
	DiscardedExcessMs [2]float64 `json:"discarded_excess_ms"`
}

// String is the stalls in a line of a report.
func (st *Stalls) String() string {
	frac := 0.0
	if st.Samples > 0 {
		frac = float64(st.Discarded) / float64(st.Samples)
	}
	rt := st.Runtime
	limited := ""
	if rt.GCLimited {
		limited = ", its CPU limiter engaged"
	}
	return fmt.Sprintf("%d of %d samples (%.1f%%) discarded as timed across a stall over %g ms (they were %.1f / %.1f ms over the matrix, median / p90); the watch woke late %d of %d times (worst %.0f ms on the clock, %.1f%% of the clock stalled); the collector %.1f%% of the CPU (assists %.1f%%) in %d cycles%s, pauses p99 %.2f ms, max %.1f ms; goroutines waited runnable %.2f / %.1f / %.1f ms median / p99 / p99.9, max %.0f ms",
		st.Discarded, st.Samples, 100*frac, st.ThresholdMs, st.DiscardedExcessMs[0], st.DiscardedExcessMs[1], st.Late, st.Ticks, st.WorstMs, 100*st.StalledShare,
		100*rt.GCShare, 100*rt.AssistShare, rt.GCCycles, limited, rt.PauseMs[0], rt.PauseMs[1], rt.SchedMs[0], rt.SchedMs[1], rt.SchedMs[2], rt.SchedMs[3])
}

// OnStall has f told of every wake-up of the stall watch later than over
// on the clock (stall.Watch.OnLate), and reports whether there is a watch
// (Stall above 0).
func (v *VivaldiRun) OnStall(over time.Duration, f func(due, woke time.Time)) bool {
	if v.watch == nil {
		return false
	}
	v.watch.OnLate(over, f)
	return true
}

// Stalls is what the stall check has done so far (nil when it is off).
func (v *VivaldiRun) Stalls() *Stalls {
	if v.watch == nil {
		return nil
	}
	st := v.watch.Stats()
	out := &Stalls{ThresholdMs: float64(v.opts.Stall) / float64(time.Millisecond), Ticks: st.Ticks, Late: st.Late,
		WorstMs: float64(st.Worst) / float64(time.Millisecond), Runtime: stall.ReadRuntime().Since(v.runtime0)}
	if ran := time.Since(v.watched); ran > 0 {
		out.StalledShare = float64(st.Stalled) / float64(ran)
	}
	out.DiscardedExcessMs[0], out.DiscardedExcessMs[1], _ = v.stalledExcess.percentiles()
	for _, svc := range v.svcs {
		if svc != nil {
			st := svc.Stats()
			out.Discarded += st.Stalled
			out.Samples += st.Samples + st.Stalled
		}
	}
	return out
}
