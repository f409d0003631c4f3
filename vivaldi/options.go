package vivaldi

import (
	"errors"
	"fmt"
	"math/rand"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// Option configures a Service, in the style of go-libp2p-kad-dht: each checks
// its own value and names itself in its error.
type Option func(*config) error

type config struct {
	model        Config
	interval     time.Duration
	timeout      time.Duration
	nearFraction float64
	nearCount    int
	peerSource   func() []peer.ID
	rng          *rand.Rand
}

func defaults() config {
	return config{
		model:        DefaultConfig(),
		interval:     10 * time.Second,
		timeout:      5 * time.Second,
		nearFraction: 0.5,
		nearCount:    16,
		rng:          rand.New(rand.NewSource(time.Now().UnixNano())),
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
// 10 s); 0 turns the background sampling off, leaving Sample to the caller.
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

// WithNearFraction sets the share of samples taken from the peers nearest to
// us by coordinate (default 0.5); the rest go to a random candidate. Near
// samples place a node precisely among its neighbours, random ones keep the
// global layout right: [1] shows that near-only neighbour sets distort it.
func WithNearFraction(f float64) Option {
	return func(cfg *config) error {
		if !(f >= 0 && f <= 1) {
			return fmt.Errorf("WithNearFraction: %v not in [0, 1]", f)
		}
		cfg.nearFraction = f
		return nil
	}
}

// WithNearCount sets how many of the nearest known peers a near sample picks
// from (default 16).
func WithNearCount(n int) Option {
	return func(cfg *config) error {
		if n < 1 {
			return fmt.Errorf("WithNearCount: %d < 1", n)
		}
		cfg.nearCount = n
		return nil
	}
}

// WithSeed seeds the service's randomness (peer choice and the model's tie
// breaking), for reproducible runs.
func WithSeed(seed int64) Option {
	return func(cfg *config) error {
		cfg.rng = rand.New(rand.NewSource(seed))
		return nil
	}
}
