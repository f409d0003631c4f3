package vivaldi

import (
	"errors"
	"fmt"
	"math"
	"math/rand"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/prometheus/client_golang/prometheus"
)

// Option configures a Service, in the style of go-libp2p-kad-dht: each checks
// its own value and names itself in its error.
type Option func(*config) error

type config struct {
	model      Config
	near       NearConfig
	interval   time.Duration
	timeout    time.Duration
	inFlight   int
	peerSource func() []peer.ID
	rng        *rand.Rand
	now        func() time.Time
	observe    func(peer.ID, time.Duration)
	// observeStalled sees the RTTs a stall check discarded.
	observeStalled func(peer.ID, time.Duration)
	connRTT        func(network.Conn) (time.Duration, bool)
	stalled        func(start, end time.Time) bool
	timeScale      float64
	reg            prometheus.Registerer
	prefix         protocol.ID
	// rate and burst are WithRateLimit's (rateSet: given; else the
	// default from the interval).
	rate    float64
	burst   int
	rateSet bool
	// tidy: WithTidyConns.
	tidy bool
}

func defaults() config {
	return config{
		model:     DefaultConfig(),
		near:      DefaultNearConfig(),
		interval:  10 * time.Second,
		timeout:   5 * time.Second,
		inFlight:  4,
		rng:       rand.New(rand.NewSource(time.Now().UnixNano())),
		now:       time.Now,
		timeScale: 1,
		prefix:    defaultPrefix,
	}
}

// WithProtocolPrefix sets the prefix the exchange's protocol ID derives
// from: <prefix>/vivaldi/1.0.0 (default /superpeer). Give the prefix of the
// overlay the service measures for (dht.Node.ProtocolPrefix): services
// under different prefixes share a host without answering each other, and
// repel.NewSelector refuses a service under another prefix than its node's.
func WithProtocolPrefix(p protocol.ID) Option {
	return func(cfg *config) error {
		if p == "" || p[0] != '/' {
			return fmt.Errorf("WithProtocolPrefix: %q must start with /", p)
		}
		cfg.prefix = p
		return nil
	}
}

// WithTimeScale divides every RTT the service measures by f (default 1):
// for an emulation that stretches time by f — every link latency and every
// timer f times longer, as the swarm's time dilation does — so that the
// coordinates, and what is measured with them, are in the network's own
// time. The machine's delays, which dilation does not stretch, shrink by f
// in what the service reports.
func WithTimeScale(f float64) Option {
	return func(cfg *config) error {
		if !(f >= 1) || f > 1000 {
			return fmt.Errorf("WithTimeScale: %v not in [1, 1000]", f)
		}
		cfg.timeScale = f
		return nil
	}
}

// WithConfig sets the model's configuration (default DefaultConfig()).
func WithConfig(c Config) Option {
	return func(cfg *config) error {
		if err := c.Validate(); err != nil {
			return fmt.Errorf("WithConfig: %w", err)
		}
		cfg.model = c
		return nil
	}
}

// WithInterval sets how often the service samples a peer on its own (default
// 10 s, each interval jittered ±50%); 0 turns the background sampling off,
// leaving Sample to the caller. A sample starts every interval whether or
// not the last one has been answered (up to WithMaxInFlight at once), so a
// peer far from the others samples as often as one in a dense region.
func WithInterval(d time.Duration) Option {
	return func(cfg *config) error {
		if d < 0 {
			return fmt.Errorf("WithInterval: %v < 0", d)
		}
		if d > 0 && d < time.Millisecond {
			return fmt.Errorf("WithInterval: %v is below 1ms", d)
		}
		cfg.interval = d
		return nil
	}
}

// WithTimeout bounds one exchange (default 5 s, at most MaxRTT: a longer
// wait could only yield a sample Update refuses).
func WithTimeout(d time.Duration) Option {
	return func(cfg *config) error {
		if d <= 0 || d > MaxRTT {
			return fmt.Errorf("WithTimeout: %v not in (0, %v]", d, MaxRTT)
		}
		cfg.timeout = d
		return nil
	}
}

// WithPeerSource supplies the candidate peers to sample (e.g. the DHT routing
// table). Without it, or when it returns none, the service takes the host's
// connected peers, or failing those the peers in its peerstore.
func WithPeerSource(f func() []peer.ID) Option {
	return func(cfg *config) error {
		if f == nil {
			return errors.New("WithPeerSource: nil function")
		}
		cfg.peerSource = f
		return nil
	}
}

// withNearFraction sets the share of samples taken from the near set, or
// spent measuring a candidate for it (default 0.5: alternately near and
// random); the rest go to a random candidate. Near samples place a node
// precisely among its neighbours, random ones keep the global layout right:
// [1] shows that near-only neighbour sets distort it.
func withNearFraction(f float64) Option {
	return func(cfg *config) error {
		if !(f >= 0 && f <= 1) {
			return fmt.Errorf("WithNearFraction: %v not in [0, 1]", f)
		}
		cfg.near.NearFraction = f
		return nil
	}
}

// withNearCount sets K, how many peers of lowest measured RTT the service
// keeps as near neighbours (default 16).
func withNearCount(n int) Option {
	return func(cfg *config) error {
		if n < 1 || n > 1024 {
			return fmt.Errorf("WithNearCount: %d not in [1, 1024]", n)
		}
		cfg.near.Size = n
		return nil
	}
}

// WithNearConfig sets the whole neighbour-set configuration (default
// DefaultNearConfig()); WithNearFraction and WithNearCount after it change
// its fields.
func WithNearConfig(c NearConfig) Option {
	return func(cfg *config) error {
		if err := c.Validate(); err != nil {
			return fmt.Errorf("WithNearConfig: %w", err)
		}
		cfg.near = c
		return nil
	}
}

// WithMaxInFlight bounds the background samples awaiting their reply at
// once (default 4); a tick that finds that many waiting skips its sample.
func WithMaxInFlight(n int) Option {
	return func(cfg *config) error {
		if n < 1 || n > 1024 {
			return fmt.Errorf("WithMaxInFlight: %d not in [1, 1024]", n)
		}
		cfg.inFlight = n
		return nil
	}
}

// WithSeed seeds the service's randomness (peer choice, jitter and the
// model's tie breaking), for reproducible runs.
func WithSeed(seed int64) Option {
	return func(cfg *config) error {
		cfg.rng = rand.New(rand.NewSource(seed))
		return nil
	}
}

// WithObserver has f called with every RTT sample the service takes (its
// own and those callers take through Sample), after the exchange, for
// checking the measurements against a known truth in experiments. f must
// not block.
func WithObserver(f func(p peer.ID, rtt time.Duration)) Option {
	return func(cfg *config) error {
		if f == nil {
			return errors.New("WithObserver: nil function")
		}
		cfg.observe = f
		return nil
	}
}

// WithTidyConns sets whether the service keeps down the connections its
// sampling makes (default false). Tidy, it
//   - tags its near neighbours in the host's connection manager
//     (NearTag, NearTagValue), so that a trim keeps the peers it samples
//     most;
//   - takes its random samples among the peer source's peers it is
//     already connected to, while at least NearConfig.Size of them are;
//   - closes a connection it opened only to measure a candidate that did
//     not become a near neighbour (or for SampleOnce), once nobody else
//     holds a stream on it and the connection manager neither protects
//     the peer nor tags it (kad-dht's routing table tag aside: an entry
//     needs no connection).
//
// Untidy, every measured candidate and every random routing-table peer
// not connected costs a connection that the connection manager keeps
// through its grace period. Off by default: in 490-peer repel swarms its
// random samples no longer dialled, but the peers held no fewer young
// connections, and nothing showed it helps the selection
// (experiments/README.md, "Where a repel swarm's connections come from").
func WithTidyConns(on bool) Option {
	return func(cfg *config) error {
		cfg.tidy = on
		return nil
	}
}

// WithConnRTT takes a sample's RTT from f, the transport's own estimate
// for the connection the exchange ran on (internal/connrtt reads the
// kernel's for TCP and quic-go's for QUIC), where f knows one, and times
// the exchange otherwise. A transport's RTT is taken when ACKs arrive, so
// a peer that waits to be scheduled — a busy machine, hundreds of peers on
// two cores — does not add its wait to the sample, as it does to a timed
// exchange. The scale of WithTimeScale applies to both.
func WithConnRTT(f func(network.Conn) (time.Duration, bool)) Option {
	return func(cfg *config) error {
		if f == nil {
			return errors.New("WithConnRTT: nil function")
		}
		cfg.connRTT = f
		return nil
	}
}

// WithStallCheck has every timed exchange checked with f over the span it
// was timed in; where f says this process stalled in it (internal/stall
// watches for that), the RTT is discarded: the model, the near neighbours
// and Sample's caller never see it (Sample returns ErrStalled), and the
// drop is counted under "stalled". The reply is used otherwise (its
// piggyback is delivered). On mocknet every link delay is one of this
// process's timers, so a collector's pause or a CPU behind its goroutines
// adds itself to every exchange in flight; a sample taken from the
// transport (WithConnRTT) is not timed by the process and is not checked.
func WithStallCheck(f func(start, end time.Time) bool) Option {
	return func(cfg *config) error {
		if f == nil {
			return errors.New("WithStallCheck: nil function")
		}
		cfg.stalled = f
		return nil
	}
}

// WithStalledObserver has f called with every RTT the stall check
// (WithStallCheck) discarded, after the exchange: what the sample would
// have been, for experiments that check the discarded samples were the
// bad ones. f must not block.
func WithStalledObserver(f func(p peer.ID, rtt time.Duration)) Option {
	return func(cfg *config) error {
		if f == nil {
			return errors.New("WithStalledObserver: nil function")
		}
		cfg.observeStalled = f
		return nil
	}
}

// WithRateLimit limits the requests one remote peer may have answered:
// its bucket refills perSecond a second up to burst; a request past that
// is reset unread and counted under "rate" in Drops. An answer costs the
// service its neighbours and, with a piggyback (repel), the gossip it
// carries both ways. The default is 4 per sampling interval, at least 10
// a second, in bursts of twice that: a peer samples one peer an interval,
// and a repel peer probes a few more. WithRateLimit(0, 0) turns the limit
// off.
func WithRateLimit(perSecond float64, burst int) Option {
	return func(cfg *config) error {
		switch {
		case math.IsNaN(perSecond) || math.IsInf(perSecond, 0) || perSecond < 0:
			return fmt.Errorf("WithRateLimit: %v not a rate ≥ 0", perSecond)
		case perSecond > 0 && burst < 1:
			return fmt.Errorf("WithRateLimit: burst %d below 1", burst)
		}
		cfg.rate, cfg.burst, cfg.rateSet = perSecond, burst, true
		return nil
	}
}

// defaultRate is WithRateLimit's default for a sampling interval (0: no
// background sampling).
func defaultRate(interval time.Duration) (float64, int) {
	r := 10.0
	if interval > 0 {
		r = max(r, 4/interval.Seconds())
	}
	return r, int(math.Ceil(2 * r))
}

// WithRegisterer exports the service's metrics (superpeer_vivaldi_*: the
// coordinate's error estimate, samples, requests served, refused frames
// and neighbour entries by reason) on reg, read at every scrape, until
// Close. By default nothing is registered. Several services may register
// on one reg: their counters add up, and the error estimate is their mean.
func WithRegisterer(reg prometheus.Registerer) Option {
	return func(cfg *config) error {
		if reg == nil {
			return errors.New("WithRegisterer: nil registerer")
		}
		cfg.reg = reg
		return nil
	}
}
