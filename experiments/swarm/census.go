package swarm

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/superpeer-overlay/superpeer/internal/census"
	"github.com/superpeer-overlay/superpeer/repel"
	"github.com/superpeer-overlay/superpeer/superpeer"
)

// MethodParams are the settings `peer swarm` gives the prefix and the
// token method (its flags), for whoever runs them on a swarm the same way.
type MethodParams struct {
	// Superpeers is S, or with a Fraction the count the peers start from.
	Superpeers int
	// Fraction makes S follow this fraction of the swarm (the census:
	// superpeer.WithFraction, repel.Config.Fraction); 0 keeps S fixed.
	Fraction float64
	// Capacity is C, the most clients a superpeer serves; with a Fraction
	// 0 means 2⌈1/Fraction⌉ (twice the mean load).
	Capacity int
	// TTL is the attachment lifetime.
	TTL time.Duration
	// Pow2 (prefix) uses Lo et al.'s 2^⌈log2 S⌉ groups.
	Pow2 bool
	// StartSpread (prefix) spreads the peers' first lookups over this long
	// (0: StartPrefix's default, n × PrefixSpreadPerPeer).
	StartSpread time.Duration
	// The token method's: its force model, the survey interval (0: none),
	// the displacement margin, how many holders a client probes and how
	// announcements travel.
	Model         repel.Model
	Survey        time.Duration
	Displace      time.Duration
	Probe         int
	Explore       int // RepelOptions.Explore
	ExploreFirst  int // RepelOptions.ExploreFirst
	Dissemination repel.Dissemination
	// Guard: repel.Config.Guard, a token changes hands only by its live
	// holder's signed hand-over.
	Guard bool
}

// PrefixOptions are the prefix selector's options (StartPrefix).
func (p MethodParams) PrefixOptions() []superpeer.Option {
	opts := []superpeer.Option{superpeer.WithSuperpeers(p.Superpeers), superpeer.WithCapacity(p.Capacity), superpeer.WithTTL(p.TTL)}
	if p.Fraction > 0 {
		opts = []superpeer.Option{superpeer.WithSuperpeers(p.Superpeers), superpeer.WithTTL(p.TTL), superpeer.WithFraction(p.Fraction)}
		if p.Capacity > 0 {
			opts = append(opts, superpeer.WithCapacity(p.Capacity))
		}
	}
	if p.Pow2 {
		opts = append(opts, superpeer.WithPow2())
	}
	if p.StartSpread > 0 {
		opts = append(opts, superpeer.WithStartSpread(p.StartSpread))
	}
	return opts
}

// RepelOptions are the token method's options (StartRepel):
// RepelSwarmConfig with the survey interval and the fraction.
func (p MethodParams) RepelOptions() RepelOptions {
	cfg := RepelSwarmConfig(p.Superpeers, p.Model)
	cfg.SurveyInterval = p.Survey
	cfg.Fraction = p.Fraction
	cfg.Guard = p.Guard
	capacity := p.Capacity
	if p.Fraction > 0 && capacity == 0 {
		capacity = 2 * int(math.Ceil(1/p.Fraction))
	}
	return RepelOptions{Config: cfg, Capacity: capacity, TTL: p.TTL, Attach: []superpeer.Option{superpeer.WithDisplace(p.Displace)}, Probe: p.Probe, Explore: p.Explore, ExploreFirst: p.ExploreFirst, Dissemination: p.Dissemination}
}

// ActiveCount is the superpeer count peer i's selector holds: the prefix
// selector's S (its code's groups) or the token method's count; -1 for a
// peer without a selector or a method without a count.
func (s *Swarm) ActiveCount(i int) int {
	switch sel := s.activeSelector(i).(type) {
	case *superpeer.PrefixSelector:
		return sel.Scheme().Groups()
	case *repel.Selector:
		return sel.Count().S
	}
	return -1
}

// CensusCount is the count the live peers hold against f·n.
type CensusCount struct {
	// N is the live peers, Target f·n.
	N      int
	Target float64
	// S is the count most live selectors hold (the larger on a tie), Min
	// and Max the least and the most any holds.
	S, Min, Max int
	// Others is the live selectors holding another count than S.
	Others int
	// Agreed: every live selector holds S. AtRest: agreed, and the census
	// would not move it (f·n within its band around S).
	Agreed, AtRest bool
}

// Census reads the count of every live peer's selector (ActiveCount)
// against cfg (its Fraction and band).
func (s *Swarm) Census(cfg census.Config) CensusCount {
	live := s.Live()
	c := CensusCount{N: len(live), Target: cfg.Fraction * float64(len(live))}
	held := map[int]int{}
	for _, i := range live {
		g := s.ActiveCount(i)
		if g < 0 {
			continue
		}
		if len(held) == 0 || g < c.Min {
			c.Min = g
		}
		c.Max = max(c.Max, g)
		held[g]++
	}
	for g, k := range held {
		if k > held[c.S] || k == held[c.S] && g > c.S {
			c.S = g
		}
	}
	for g, k := range held {
		if g != c.S {
			c.Others += k
		}
	}
	c.Agreed = len(held) == 1
	c.AtRest = c.Agreed && c.S > 0 && cfg.Target(float64(len(live)), c.S) == c.S
	return c
}

// WaitCensus waits until the count is at rest for the swarm's size: every
// live selector holds one S, and the census would not move it (f·n within
// its band).
func (s *Swarm) WaitCensus(ctx context.Context, f float64) error {
	cfg, err := census.Config{Fraction: f}.Filled()
	if err != nil {
		return err
	}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		c := s.Census(cfg)
		if c.AtRest {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("census not at rest: S = %d (held %d–%d) for f·n = %.1f: %w", c.S, c.Min, c.Max, c.Target, ctx.Err())
		case <-tick.C:
		}
	}
}
