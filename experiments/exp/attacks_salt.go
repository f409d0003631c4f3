package exp

import (
	"context"
	"fmt"
	"math/rand"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/superpeer-overlay/superpeer/experiments/latency"
	"github.com/superpeer-overlay/superpeer/experiments/report"
	"github.com/superpeer-overlay/superpeer/experiments/swarm"
	"github.com/superpeer-overlay/superpeer/superpeer"
)

// saltParams are the live salt-change part's: a prefix swarm with salted
// group keys (superpeer.WithSalt) whose salt is replaced Changes times,
// each after the swarm has settled and run Steady at the settled rate.
type saltParams struct {
	Latency  string        `json:"latency"`
	N        int           `json:"n"`
	S        int           `json:"s"`
	Capacity int           `json:"capacity"`
	TTL      time.Duration `json:"ttl_ns"`
	Changes  int           `json:"changes"`
	Steady   time.Duration `json:"steady_ns"`
	Sample   time.Duration `json:"sample_interval_ns"`
	Notes    []string      `json:"notes"`
}

// saltChange is what one new salt cost a live prefix swarm: every group
// key moves at once, so (almost) every group re-selects its superpeer and
// its clients re-attach.
type saltChange struct {
	N        int `json:"n"`
	S        int `json:"s"`
	Change   int `json:"change"`
	Clients  int `json:"clients"`
	Capacity int `json:"capacity"`
	// GroupsMoved are the groups whose superpeer is another peer under
	// the new salt; Reattached the clients served by another superpeer
	// once the swarm settled again.
	GroupsMoved int `json:"groups_moved"`
	Reattached  int `json:"clients_reattached"`
	// TakenSeconds is from the new salt until every peer's selector had
	// taken it (at its next step).
	TakenSeconds float64 `json:"taken_seconds"`
	// SettleSeconds is from the new salt until every peer's role is the
	// one the new keys call for and every client is attached
	// (swarm.WaitPrefix); Correct that the superpeers are then the
	// simulator's (sim.Prefix) under the new salt on the same keys.
	SettleSeconds float64 `json:"settle_seconds"`
	Correct       bool    `json:"correct"`
	// Clients without a superpeer (sampled every Sample): how many were
	// ever, the longest any one was in all, and the client-seconds.
	EverUnserved          int     `json:"clients_ever_unserved"`
	MaxUnservedSeconds    float64 `json:"max_client_unserved_seconds"`
	UnservedClientSeconds float64 `json:"unserved_client_seconds"`
	// Requests the peers sent (kad-dht, raw closest, attach) per peer per
	// second, at the settled rate before the change and while it lasted,
	// and ExtraPerPeer the requests a peer sent for the change beyond the
	// settled rate.
	SteadyRate   float64 `json:"steady_requests_per_peer_second"`
	ChangeRate   float64 `json:"change_requests_per_peer_second"`
	ExtraPerPeer float64 `json:"extra_requests_per_peer"`
}

func requests(t swarm.Traffic) uint64 { return t.KadRequests + t.ClosestRequests + t.AttachRequests }

// runSaltChanges measures saltChange live: the cost, to the honest peers,
// of the salt the grinding defence renews every epoch.
func runSaltChanges(o Options, r *report.Run) (saltParams, []saltChange, error) {
	p := saltParams{Latency: latency.Default, N: 300, S: 16, TTL: 6 * time.Second, Changes: 3, Steady: 10 * time.Second, Sample: 100 * time.Millisecond,
		Notes: []string{
			"one live prefix swarm (mocknet, the latency matrix's RTTs) with salted group keys; every peer's selector reads the salt at each of its steps (superpeer.WithSalt), as with superpeer.EpochSalt at an epoch's end, and the experiment replaces the value once the swarm has settled and run `steady` at the settled rate",
			"groups moved: superpeer set before against after; re-attached: clients whose superpeer is another peer after; unserved: a client whose selector names no superpeer at a sample",
			"requests: kad-dht requests, raw closest requests and attach requests (renewals included) sent by all live peers",
		}}
	switch {
	case o.tiny:
		p.N, p.S, p.Changes, p.Steady = 40, 4, 1, 2*time.Second
	case o.Quick:
		p.N, p.S, p.Changes, p.Steady = 100, 8, 2, 5*time.Second
	}
	p.Capacity = capacityFor(p.N, p.S)
	rtt, _, err := space(p.Latency, p.N, o.Seed)
	if err != nil {
		return p, nil, err
	}
	pl := rtt.(*latency.Placement)
	rng := rand.New(rand.NewSource(o.Seed*4099 + 17))
	var salt atomic.Pointer[[32]byte]
	next := func() [32]byte {
		var v [32]byte
		rng.Read(v[:])
		salt.Store(&v)
		return v
	}
	next()
	s, took, err := liveSwarm(o.Ctx, liveConfig{N: p.N, S: p.S, Seed: o.Seed, RTT: rtt, HostOf: pl.Host, Capacity: p.Capacity, TTL: p.TTL,
		Options: []superpeer.Option{superpeer.WithSalt(func(time.Time) [32]byte { return *salt.Load() })}}, o.Stderr)
	if err != nil {
		return p, nil, err
	}
	defer s.Close()
	fmt.Fprintf(o.Stdout, "\nsalted prefix swarm of %d selected %d superpeers in %.1f s\n", p.N, len(s.PrefixState().Superpeers), took.Seconds())
	scheme, err := superpeer.Exact(p.S)
	if err != nil {
		return p, nil, err
	}
	t := report.NewTable("n", "S", "change", "all took it s", "groups moved", "clients re-attached", "of clients", "settle s", "correct", "ever unserved", "longest unserved s", "unserved client-s", "requests/peer/s settled", "during", "extra a peer")
	var rows []saltChange
	var series []report.Series
	for c := 1; c <= p.Changes; c++ {
		t0, at := s.Traffic(), time.Now()
		select {
		case <-o.Ctx.Done():
			return p, nil, o.Ctx.Err()
		case <-time.After(p.Steady):
		}
		steady := requests(s.Traffic()) - requests(t0)
		row := saltChange{N: p.N, S: p.S, Change: c, Capacity: p.Capacity}
		row.SteadyRate = float64(steady) / float64(len(s.Live())) / time.Since(at).Seconds()
		before := s.PrefixState()
		t1 := s.Traffic()
		v := next()
		changed := time.Now()
		stop := sampleUnserved(s, p.Sample, changed)
		taken, err := waitSalt(o.Ctx, s, v)
		var d time.Duration
		if err == nil {
			// Every peer steps with the new keys now; the swarm's check
			// (against the keys of one peer's scheme) is the new one's.
			d, err = s.WaitPrefix(o.Ctx, changed)
		}
		unserved, pts := stop()
		if err != nil {
			return p, nil, err
		}
		row.TakenSeconds = taken.Sub(changed).Seconds()
		after := s.PrefixState()
		row.SettleSeconds = d.Seconds()
		row.ChangeRate = float64(requests(s.Traffic())-requests(t1)) / float64(len(s.Live())) / d.Seconds()
		row.ExtraPerPeer = (row.ChangeRate - row.SteadyRate) * d.Seconds()
		row.Correct = slices.Equal(simSuperpeers(s, scheme.Salted(v)), after.Superpeers)
		for _, sp := range after.Superpeers {
			if !slices.Contains(before.Superpeers, sp) {
				row.GroupsMoved++
			}
		}
		for _, i := range s.Live() {
			if after.Assignment[i] == i {
				continue
			}
			row.Clients++
			if after.Assignment[i] != before.Assignment[i] {
				row.Reattached++
			}
		}
		for _, secs := range unserved {
			row.EverUnserved++
			row.UnservedClientSeconds += secs
			row.MaxUnservedSeconds = max(row.MaxUnservedSeconds, secs)
		}
		rows = append(rows, row)
		t.Add(row.N, row.S, c, row.TakenSeconds, row.GroupsMoved, row.Reattached, row.Clients, row.SettleSeconds, row.Correct, row.EverUnserved, row.MaxUnservedSeconds,
			row.UnservedClientSeconds, row.SteadyRate, row.ChangeRate, row.ExtraPerPeer)
		xs, ys := make([]float64, len(pts)), make([]float64, len(pts))
		for i, pt := range pts {
			xs[i], ys[i] = pt.T, float64(pt.Unserved)
		}
		series = append(series, report.Series{Name: fmt.Sprintf("salt %d", c), X: xs, Y: ys})
	}
	if err := printTable(o, r, "salt_changes", fmt.Sprintf("a new salt in a live prefix swarm (%d peers, S = %d, capacity %d)", p.N, p.S, p.Capacity), t); err != nil {
		return p, nil, err
	}
	err = r.Lines("salt_changes", report.Figure{Title: fmt.Sprintf("clients without a superpeer after a new salt (%d peers, S = %d)", p.N, p.S), X: "seconds since the new salt", Y: "clients unserved"}, series)
	return p, rows, err
}

// waitSalt waits until every live selector of s steps with salt v, and
// says when that was.
func waitSalt(ctx context.Context, s *swarm.Swarm, v [32]byte) (time.Time, error) {
	tk := time.NewTicker(10 * time.Millisecond)
	defer tk.Stop()
	for {
		behind := 0
		for _, i := range s.Live() {
			if got, _ := s.Selector(i).Scheme().Salt(); got != v {
				behind++
			}
		}
		if behind == 0 {
			return time.Now(), nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("a new salt: %d peers never took it: %w", behind, ctx.Err())
		case <-tk.C:
		}
	}
}

// unservedPoint is one sample of sampleUnserved.
type unservedPoint struct {
	T        float64
	Unserved int
}

// sampleUnserved samples every live client of s each interval until the
// returned stop is called, which gives the seconds each client was seen
// without a superpeer (by peer index) and how many were at each sample
// (seconds since from).
func sampleUnserved(s *swarm.Swarm, interval time.Duration, from time.Time) (stop func() (map[int]float64, []unservedPoint)) {
	var (
		secs = map[int]float64{}
		pts  []unservedPoint
		done = make(chan struct{})
		wg   sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		tk := time.NewTicker(interval)
		defer tk.Stop()
		last := time.Now()
		for {
			now := time.Now()
			n := 0
			for _, i := range s.Live() {
				sel := s.Selector(i)
				if sel.Role() != superpeer.Superpeer && sel.Superpeer() == "" {
					secs[i] += now.Sub(last).Seconds()
					n++
				}
			}
			pts = append(pts, unservedPoint{T: now.Sub(from).Seconds(), Unserved: n})
			last = now
			select {
			case <-done:
				return
			case <-tk.C:
			}
		}
	}()
	return func() (map[int]float64, []unservedPoint) {
		close(done)
		wg.Wait()
		return secs, pts
	}
}
