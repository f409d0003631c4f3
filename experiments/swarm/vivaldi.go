package swarm

import (
	"context"
	"fmt"
	"math/rand"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/superpeer-overlay/superpeer/experiments/vivaldieval"
	"github.com/superpeer-overlay/superpeer/vivaldi"
)

// VivaldiOptions configure the coordinate service on every peer of a swarm.
type VivaldiOptions struct {
	// Interval is how often each peer samples one peer (default 300 ms).
	Interval time.Duration
	// Random is how many random swarm peers each peer may sample besides
	// its routing table (default 16): a fixed peer sample drawn at start,
	// as a peer-sampling service would give it.
	Random int
	// Seed seeds the peer samples and the services (default the swarm's).
	Seed int64
	// Config is the model (default vivaldi.DefaultConfig()).
	Config *vivaldi.Config
}

// VivaldiWait says when the coordinates are good enough: the live median
// relative error passes Bound, or it has not improved by MinImprove
// (relative) over the best seen for Patience polls in a row.
type VivaldiWait struct {
	// Bound stops the wait once the median is below it (0: no bound).
	Bound float64
	// Poll is how often the error is measured (default 1 s).
	Poll time.Duration
	// Patience is how many polls without improvement end the wait
	// (default 5).
	Patience int
	// MinImprove is the relative drop of the median that counts as an
	// improvement (default 0.02).
	MinImprove float64
}

// VivaldiSummary is the `vivaldi` block of the swarm report: the live
// coordinates' relative error against the matrix, over all pairs of live
// peers.
type VivaldiSummary struct {
	Median float64 `json:"median"`
	P90    float64 `json:"p90"`
	// Seconds is how long the wait took; Samples is the RTT samples per
	// peer taken by then.
	Seconds float64 `json:"seconds"`
	Samples float64 `json:"samples_per_peer"`
	// Stopped says why the wait ended: "bound" or "plateau".
	Stopped string `json:"stopped"`
}

// VivaldiRun is a vivaldi.Service on every peer of a swarm. The run drives
// the sampling itself (each peer alternates between one of its 16 nearest
// known peers and a random candidate, as the service does), so that
// SetInterval can slow it down once the coordinates are good: hundreds of
// in-process peers sampling every few hundred ms cost more CPU than the
// method that uses the coordinates.
type VivaldiRun struct {
	s        *Swarm
	svcs     []*vivaldi.Service
	start    time.Time
	dead     []bool
	interval atomic.Int64
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

// StartVivaldi starts the coordinate service on every peer that is in the
// overlay. Each samples from its DHT routing table and a fixed random sample
// of the swarm.
func (s *Swarm) StartVivaldi(opts VivaldiOptions) (*VivaldiRun, error) {
	if opts.Interval == 0 {
		opts.Interval = 300 * time.Millisecond
	}
	if opts.Random == 0 {
		opts.Random = 16
	}
	if opts.Seed == 0 {
		opts.Seed = s.cfg.Seed + 7
	}
	if opts.Random < 0 || opts.Interval < 0 {
		return nil, fmt.Errorf("swarm: vivaldi Random %d / Interval %v must not be negative", opts.Random, opts.Interval)
	}
	rng := rand.New(rand.NewSource(opts.Seed))
	v := &VivaldiRun{s: s, svcs: make([]*vivaldi.Service, len(s.Peers)), dead: make([]bool, len(s.Peers))}
	v.interval.Store(int64(opts.Interval))
	ctx, cancel := context.WithCancel(context.Background())
	v.cancel = cancel
	live := s.Live()
	for _, i := range live {
		p := s.Peers[i]
		random := make([]peer.ID, 0, opts.Random)
		for k := 0; k < opts.Random && len(live) > 1; k++ {
			j := live[rng.Intn(len(live))]
			if j != i {
				random = append(random, s.Peers[j].Host.ID())
			}
		}
		node := p.Node
		source := func() []peer.ID {
			return append(node.RoutingTable().ListPeers(), random...)
		}
		vo := []vivaldi.Option{vivaldi.WithInterval(0), vivaldi.WithSeed(rng.Int63())}
		if opts.Config != nil {
			vo = append(vo, vivaldi.WithConfig(*opts.Config))
		}
		svc, err := vivaldi.NewService(p.Host, vo...)
		if err != nil {
			v.Close()
			return nil, fmt.Errorf("swarm: peer %d: %w", i, err)
		}
		v.svcs[i] = svc
		v.wg.Add(1)
		go v.drive(ctx, svc, p.Host.ID(), source, rng.Int63())
	}
	v.start = time.Now()
	return v, nil
}

// SetInterval changes how often every peer samples (from its next sample).
func (v *VivaldiRun) SetInterval(d time.Duration) {
	if d > 0 {
		v.interval.Store(int64(d))
	}
}

// drive samples one peer per interval, jittered: half the time one of the
// 16 nearest peers whose coordinate it knows, else a random candidate.
func (v *VivaldiRun) drive(ctx context.Context, svc *vivaldi.Service, self peer.ID, source func() []peer.ID, seed int64) {
	defer v.wg.Done()
	rng := rand.New(rand.NewSource(seed))
	for {
		d := time.Duration(v.interval.Load())
		select {
		case <-ctx.Done():
			return
		case <-time.After(d/2 + time.Duration(rng.Int63n(int64(d)))):
		}
		var p peer.ID
		if rng.Intn(2) == 0 {
			me := svc.Coordinate()
			type pd struct {
				p peer.ID
				d float64
			}
			var known []pd
			for q, c := range svc.PeerCoordinates() {
				known = append(known, pd{q, me.DistanceTo(c)})
			}
			sort.Slice(known, func(i, j int) bool { return known[i].d < known[j].d })
			if len(known) > 16 {
				known = known[:16]
			}
			if len(known) > 0 {
				p = known[rng.Intn(len(known))].p
			}
		}
		if p == "" {
			cands := source()
			if len(cands) == 0 {
				continue
			}
			p = cands[rng.Intn(len(cands))]
		}
		if p == self {
			continue
		}
		_, _ = svc.Sample(ctx, p)
	}
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
	start := time.Now()
	tick := time.NewTicker(w.Poll)
	defer tick.Stop()
	best, stale := 0.0, 0
	for first := true; ; first = false {
		med, p90 := v.Error()
		v.s.progress("vivaldi", int(100*min(1, max(0, 1-med))), 100)
		sum := VivaldiSummary{Median: med, P90: p90, Seconds: time.Since(start).Seconds(), Samples: v.Samples()}
		switch {
		case w.Bound > 0 && med < w.Bound:
			sum.Stopped = "bound"
			return sum, nil
		case first || med < best*(1-w.MinImprove):
			best, stale = med, 0
		default:
			stale++
			if stale >= w.Patience {
				sum.Stopped = "plateau"
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

// Summary is the current error, without waiting.
func (v *VivaldiRun) Summary() VivaldiSummary {
	med, p90 := v.Error()
	return VivaldiSummary{Median: med, P90: p90, Seconds: time.Since(v.start).Seconds(), Samples: v.Samples()}
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
	v.cancel()
	v.wg.Wait()
	for i, svc := range v.svcs {
		if svc != nil && !v.dead[i] {
			v.dead[i] = true
			_ = svc.Close()
		}
	}
}
