package repel

import (
	"fmt"
	"math"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/superpeer-overlay/superpeer/superpeer"
	"github.com/superpeer-overlay/superpeer/vivaldi"
)

// Option configures NewSelector. Options apply in order, a later one
// overriding an earlier; an invalid value makes NewSelector fail with an
// error wrapping ErrOptions.
type Option func(*selectorOptions) error

// WithConfig sets the token method (Tokens = S; default DefaultConfig(),
// LocalConfig() for in-process swarms). c must be valid (Config.Validate):
// a partly filled Config is refused, not completed. A zero Capacity takes
// the attach protocol's (superpeer.WithCapacity).
func WithConfig(c Config) Option {
	return func(o *selectorOptions) error {
		if err := c.Validate(); err != nil {
			return fmt.Errorf("%w: WithConfig: %w", ErrOptions, err)
		}
		o.Config = c
		return nil
	}
}

// WithAttach configures the attach protocol (capacity C, TTL,
// displacement, metrics), the same as the prefix method's; the
// selector's clients say their regret, so displacement works for them.
// Several WithAttach add up. The protocol runs under the node's protocol
// prefix whatever superpeer.WithProtocolPrefix says.
func WithAttach(opts ...superpeer.Option) Option {
	return func(o *selectorOptions) error {
		o.Attach = append(o.Attach, opts...)
		return nil
	}
}

// WithVivaldi gives the selector the peer's Vivaldi service, under the
// node's protocol prefix (vivaldi.WithProtocolPrefix). Without it the
// selector makes its own, sampling the node's routing table every 2 s, and
// closes it at Close.
func WithVivaldi(v *vivaldi.Service) Option {
	return func(o *selectorOptions) error { o.Vivaldi = v; return nil }
}

// WithSeed seeds the model's randomness (default: from the clock).
func WithSeed(seed uint64) Option {
	return func(o *selectorOptions) error { o.Seed = seed; return nil }
}

// WithDissemination sets how announcements travel: Piggyback (default) on
// the Vivaldi service's exchanges, or GossipSub on the node's pubsub (the
// node needs a router: dht.WithGossipSub or dht.WithPubSub).
func WithDissemination(d Dissemination) Option {
	return func(o *selectorOptions) error {
		if d != Piggyback && d != GossipSub {
			return fmt.Errorf("%w: WithDissemination(%v): unknown", ErrOptions, d)
		}
		o.Dissemination = d
		return nil
	}
}

// WithProbe sets how many holders, nearest first, a client has measured
// (one Vivaldi exchange each) before it chooses, at most every five
// renewals while attached (default 3; 0 or negative: none, by
// prediction alone). AttachConfig.Probe; the other fields of the client's Chooser are
// DefaultAttachConfig's.
func WithProbe(n int) Option {
	return func(o *selectorOptions) error {
		if n == 0 {
			n = -1
		}
		o.Probe = n
		return nil
	}
}

// WithExploreFirst has a client explore at every attach step, not every
// five renewals, while it has measured fewer than n of the live holders
// (default 0: every five renewals from the start).
// AttachConfig.ExploreFirst.
func WithExploreFirst(n int) Option {
	return func(o *selectorOptions) error {
		if n < 0 {
			return fmt.Errorf("repel: WithExploreFirst(%d): want ≥ 0", n)
		}
		o.ExploreFirst = n
		return nil
	}
}

// WithExplore sets how many more holders a client measures after an
// attach step, at most every five renewals, beyond the Probe, among those
// it has not measured, nearest by its coordinates first (default 1; 0 or
// negative: none). It finds the holders the coordinates misplace: a near
// holder predicted far is never among the Probe nearest.
// AttachConfig.Explore.
func WithExplore(n int) Option {
	return func(o *selectorOptions) error {
		if n == 0 {
			n = -1
		}
		o.Explore = n
		return nil
	}
}

// WithRegisterer exports the selector's metrics on r until Close
// (superpeer_repel_*: token events, tokens held and known, name lookups,
// bytes sent, refused frames by reason), and those of its attach protocol
// unless WithAttach gives it another. Nil, the default, registers nothing.
// Several selectors may register on one Registerer: their values add up
// (tokens known is their mean).
func WithRegisterer(r prometheus.Registerer) Option {
	return func(o *selectorOptions) error { o.Registerer = r; return nil }
}

// WithRateLimit limits the move, survey and announce streams one remote
// peer may open: one bucket a peer for the three, refilled perSecond a
// second up to burst; a stream past that is reset unread and counted
// under "rate" in Drops. Each such frame costs this peer work: a move or
// a survey a step of the model and an answer (a survey's, on a stream of
// its own), an announcement a signature check. The default is 8 per
// shortest of MoveInterval, MovingAnnounceInterval and AnnounceInterval,
// in bursts of 16 (an honest holder sends a peer at most an announcement
// and a move an interval, and a survey or a report a SurveyInterval).
// WithRateLimit(0, 0) turns the limit off.
func WithRateLimit(perSecond float64, burst int) Option {
	return func(o *selectorOptions) error {
		switch {
		case math.IsNaN(perSecond) || math.IsInf(perSecond, 0) || perSecond < 0:
			return fmt.Errorf("%w: WithRateLimit(%v): not a rate ≥ 0", ErrOptions, perSecond)
		case perSecond > 0 && burst < 1:
			return fmt.Errorf("%w: WithRateLimit: burst %d below 1", ErrOptions, burst)
		}
		o.Rate, o.Burst, o.rateSet = perSecond, burst, true
		return nil
	}
}
