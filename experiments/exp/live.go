package exp

import (
	"context"
	"errors"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/superpeer-overlay/superpeer/dht"
	"github.com/superpeer-overlay/superpeer/experiments/latency"
	"github.com/superpeer-overlay/superpeer/experiments/report"
	"github.com/superpeer-overlay/superpeer/experiments/sim"
	"github.com/superpeer-overlay/superpeer/experiments/swarm"
	"github.com/superpeer-overlay/superpeer/superpeer"
)

// liveConfig is one live swarm running the prefix method.
type liveConfig struct {
	N        int
	S        int
	Seed     int64
	RTT      latency.RTTs
	HostOf   func(int) int
	Capacity int
	TTL      time.Duration
	// Parallel is how many peers join at once (0: the swarm's default).
	Parallel int
	// SelectTimeout bounds the wait for the selection to converge (0: the
	// caller's context alone). On timeout liveSwarm returns the swarm
	// with errSelectTimeout.
	SelectTimeout time.Duration
	// Options are further prefix options (superpeer.WithSalt, ...).
	Options []superpeer.Option
}

var errSelectTimeout = errors.New("selection did not converge in time")

// buildSwarm builds, joins and converges a swarm, showing its stages on
// stderr (and those of what runs on it later: finish ends the line of the
// last). The caller closes it.
func buildSwarm(ctx context.Context, cfg swarm.Config, stderr io.Writer) (s *swarm.Swarm, finish func(), err error) {
	var (
		mu    sync.Mutex
		bar   *report.Progress
		stage string
	)
	finish = func() {
		mu.Lock()
		defer mu.Unlock()
		if bar != nil {
			bar.Finish()
		}
	}
	cfg.Progress = func(st string, done, total int) {
		mu.Lock()
		defer mu.Unlock()
		if st != stage {
			if bar != nil {
				bar.Finish()
			}
			stage = st
			bar = report.NewProgress(stderr, st, total)
		}
		bar.Set(done)
	}
	if s, err = swarm.New(ctx, cfg); err != nil {
		return nil, nil, err
	}
	if err := s.Join(ctx); err != nil {
		s.Close()
		return nil, nil, err
	}
	if err := s.WaitConverged(ctx, 20); err != nil {
		s.Close()
		return nil, nil, err
	}
	finish()
	return s, finish, nil
}

// liveSwarm builds, joins and converges a swarm and runs the prefix
// selection on it until it has converged. The caller closes it.
func liveSwarm(ctx context.Context, c liveConfig, stderr io.Writer) (*swarm.Swarm, time.Duration, error) {
	s, finish, err := buildSwarm(ctx, swarm.Config{N: c.N, Seed: c.Seed, RTT: c.RTT, HostOf: c.HostOf, Parallel: c.Parallel}, stderr)
	if err != nil {
		return nil, 0, err
	}
	fail := func(err error) (*swarm.Swarm, time.Duration, error) {
		s.Close()
		return nil, 0, err
	}
	if c.TTL == 0 {
		c.TTL = 6 * time.Second
	}
	err = s.StartPrefix(ctx, append([]superpeer.Option{superpeer.WithSuperpeers(c.S), superpeer.WithCapacity(c.Capacity), superpeer.WithTTL(c.TTL)}, c.Options...)...)
	if err != nil {
		return fail(err)
	}
	wctx := ctx
	if c.SelectTimeout > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, c.SelectTimeout)
		defer cancel()
	}
	took, err := s.WaitPrefix(wctx, s.SelectionStart())
	finish()
	if err != nil {
		if c.SelectTimeout > 0 && ctx.Err() == nil {
			return s, time.Since(s.SelectionStart()), errSelectTimeout
		}
		return fail(err)
	}
	return s, took, nil
}

// capacityFor is the swarm's default capacity, twice the mean load.
func capacityFor(n, S int) int { return 2 * ((n + S - 1) / S) }

// simSuperpeers is the superpeer set the simulator (sim.Prefix) picks
// under scheme among s's live peers, by peer index, sorted: a check of a
// live selection that does not share the swarm's own.
func simSuperpeers(s *swarm.Swarm, scheme superpeer.Prefix) []int {
	live := s.Live()
	keys := make([]dht.Key, len(live))
	for i, idx := range live {
		keys[i] = s.Peers[idx].Key
	}
	want := sim.Prefix(keys, scheme, 0)
	exp := make([]int, len(want.Superpeers))
	for i, j := range want.Superpeers {
		exp[i] = live[j]
	}
	slices.Sort(exp)
	return exp
}
