package superpeer

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/prometheus/client_golang/prometheus"
)

// Option configures a prefix selector (NewPrefix, NewPrefixCore) and the
// attach protocol (NewAttach, which the selectors of every method make).
// Options apply in order, a later one overriding an earlier; a constructor
// ignores the options that do not concern it (NewAttach ignores
// WithSuperpeers). An invalid value makes the constructor fail with an error
// wrapping ErrOption.
type Option func(*options) error

// ErrOption is wrapped by the error of a constructor given an invalid
// option.
var ErrOption = errors.New("superpeer: invalid option")

func badOption(name string, v any, why string) error {
	return fmt.Errorf("%w: %s(%v): %s", ErrOption, name, v, why)
}

// WithSuperpeers sets S, the number of superpeers wanted (default 8): S
// groups of the exact prefix code, or 2^⌈log2 S⌉ with WithPow2.
func WithSuperpeers(S int) Option {
	return func(o *options) error {
		if S < 1 || S > 1<<maxPrefixBits {
			return badOption("WithSuperpeers", S, fmt.Sprintf("not in [1, %d]", 1<<maxPrefixBits))
		}
		o.Superpeers = S
		return nil
	}
}

// WithPow2 groups the keys into 2^⌈log2 S⌉ groups of equal key share, Lo
// et al.'s own scheme, instead of exactly S.
func WithPow2() Option {
	return func(o *options) error { o.Pow2 = true; return nil }
}

// WithRecheck sets how often a peer looks its superpeer key up again
// (default the attach TTL). Attachments are renewed every TTL/3 apart from
// this; a lost attachment (a refusal, or failed renewals for the TTL) and a
// routing-table change in the peer's group each bring a lookup forward.
func WithRecheck(every time.Duration) Option {
	return positive("WithRecheck", every, func(o *options) { o.Recheck = every })
}

// WithMinRecheck spaces rechecks triggered by routing-table changes and
// refusals (default 500 ms), so a burst of joins costs one lookup.
func WithMinRecheck(d time.Duration) Option {
	return positive("WithMinRecheck", d, func(o *options) { o.MinRecheck = d })
}

// WithStartSpread spreads the first lookups of peers started together over
// this window, by peer key (default 2 × the minimum recheck), and likewise
// the lookups of the clients of a superpeer that failed. A swarm of n peers
// on one machine sets it in proportion to n.
func WithStartSpread(d time.Duration) Option {
	return positive("WithStartSpread", d, func(o *options) { o.StartSpread = d })
}

// WithCapacity sets C, the most clients a superpeer serves (default 0:
// unbounded).
func WithCapacity(C int) Option {
	return func(o *options) error {
		if C < 0 {
			return badOption("WithCapacity", C, "negative")
		}
		o.Attach.Capacity = C
		o.capacitySet = true
		return nil
	}
}

// WithFraction makes the prefix method's superpeer count follow a fraction
// f of the network (Lo et al.'s "predefined portion of the peers"): S is
// max(1, round(f·n)) for the size n that the superpeers count between them
// — each reports itself and its clients, and they exchange their tables
// (the census protocol, under the protocol prefix) — agreed by every peer
// (the value and its version travel on every attach request and answer,
// and the fresher wins), with hysteresis (S holds while f·n is within 5%
// of it, and at least 0.6), so it does not flap as n jitters. WithSuperpeers
// is only where a peer starts. The capacity, unless WithCapacity sets it,
// follows as 2⌈1/f⌉: twice the mean load. Not with WithPow2, whose groups
// change by halves.
func WithFraction(f float64) Option {
	return func(o *options) error {
		if math.IsNaN(f) || f <= 0 || f > 1 {
			return badOption("WithFraction", f, "not in (0, 1]")
		}
		o.Fraction = f
		return nil
	}
}

// WithTTL sets how long an attachment lives without renewal (default 30 s;
// clients renew every TTL/3).
func WithTTL(ttl time.Duration) Option {
	return func(o *options) error {
		if ttl < 3 || ttl > time.Duration(math.MaxUint32)*time.Millisecond {
			return badOption("WithTTL", ttl, "not in [3ns, 2^32 ms]")
		}
		o.Attach.TTL = ttl
		return nil
	}
}

// WithDisplace sets the margin of displacement (default DefaultDisplace):
// a full superpeer takes a new client in place of the one that loses least
// by leaving when the newcomer's regret (ClientRequest.Regret: its next
// choice's RTT minus this one's) exceeds that client's by more than margin;
// the displaced client is refused at its next renewal and goes to its next
// choice. The places then go to the clients that lose most without them,
// as a centralised regret-ordered assignment gives them, not to whoever
// asked first. A margin ≤ 0 turns displacement off (first come, first
// served). Clients that say no regret (the prefix method's) never displace
// anyone.
func WithDisplace(margin time.Duration) Option {
	return func(o *options) error { o.Attach.Displace = margin; return nil }
}

// WithProtocolPrefix sets the overlay's prefix, which the attach protocol
// ID derives from: <prefix>/attach/1.0.0 (default
// dht.DefaultProtocolPrefix). NewPrefix runs its attach protocol under
// its node's prefix (dht.Node.ProtocolPrefix) and refuses another;
// repel.NewSelector uses its node's whatever this says.
func WithProtocolPrefix(p protocol.ID) Option {
	return func(o *options) error {
		if p == "" || p[0] != '/' {
			return badOption("WithProtocolPrefix", p, "must start with /")
		}
		o.Attach.ProtocolPrefix = p
		return nil
	}
}

// WithRateLimit limits what one remote peer may ask of the attach and
// census protocols: each refills perSecond streams a second into a bucket
// of burst, per peer and per protocol; a stream past that is reset unread
// and counted under "rate" (attach) or "census-rate" (census) in
// Attach.Drops. The default is 8 per TTL, at least 1 a second, in bursts of
// 8: an honest client renews every TTL/3 and a superpeer exchanges
// digests every 5 s, so only a peer that churns attachments or floods
// requests meets it. WithRateLimit(0, 0) turns the limit off.
func WithRateLimit(perSecond float64, burst int) Option {
	return func(o *options) error {
		switch {
		case math.IsNaN(perSecond) || math.IsInf(perSecond, 0) || perSecond < 0:
			return badOption("WithRateLimit", perSecond, "not a rate ≥ 0")
		case perSecond > 0 && burst < 1:
			return badOption("WithRateLimit", burst, "a burst below 1")
		}
		o.Attach.Rate, o.Attach.Burst, o.Attach.rateSet = perSecond, burst, true
		return nil
	}
}

// WithRegisterer exports the attach protocol's metrics on r until Close
// (superpeer_attach_*: clients served, capacity, requests by result,
// displacements, refused frames by reason; and superpeer_selector_role,
// the peer's role). Nil, the default, registers nothing. The attach
// protocols of several peers may register on one Registerer: their values
// add up (the role gauge then counts the peers in each role).
func WithRegisterer(r prometheus.Registerer) Option {
	return func(o *options) error { o.Attach.Registerer = r; return nil }
}

func positive(name string, d time.Duration, set func(*options)) Option {
	return func(o *options) error {
		if d <= 0 {
			return badOption(name, d, "must be positive")
		}
		set(o)
		return nil
	}
}

// WithIDPuzzle makes only identities with at least c puzzle bits
// (PuzzleBits) superpeers: the DHT lookups of a group's superpeer pass
// over every other peer, and a peer whose own identity falls short is a
// client only. An honest peer pays about 2^c key derivations once, for its
// identity (PuzzleKey); an attacker grinding identities for a group pays
// them for every try, so c = 10 makes taking a chosen group about 1 000
// times dearer (`peer experiment attacks`). Every peer of a network must
// use the same c. Default 0: no puzzle.
func WithIDPuzzle(c int) Option {
	return func(o *options) error {
		if c < 0 || c > MaxPuzzleBits {
			return badOption("WithIDPuzzle", c, fmt.Sprintf("must be in [0, %d]", MaxPuzzleBits))
		}
		o.Puzzle = c
		return nil
	}
}

// WithSalt salts the group keys (Prefix.Salted) with salt(now), which
// the selector asks at every step of its own: when the value changes, the
// groups keep their members and each re-selects its superpeer, the member
// nearest the group's new key. salt must give every peer the same value at
// the same time and nobody the value ahead of it: a public randomness
// beacon's value for the epoch now falls in (EpochSalt), or a value drawn
// when the network starts and given to every peer. Every peer of a network
// must use the same salt. Default: none (Lo et al.'s unsalted keys).
func WithSalt(salt func(now time.Time) [32]byte) Option {
	return func(o *options) error {
		if salt == nil {
			return badOption("WithSalt", "nil", "needs a function")
		}
		o.Salt = salt
		return nil
	}
}

// EpochSalt is a salt for WithSalt that changes every period: the
// beacon's value for epoch ⌊now / period⌋ (Unix time). The beacon is the
// application's: it has to agree at every peer and be unknown before its
// epoch.
// A period of zero or less is one epoch for all time, 0.
func EpochSalt(period time.Duration, beacon func(epoch uint64) [32]byte) func(now time.Time) [32]byte {
	return func(now time.Time) [32]byte {
		if period <= 0 {
			return beacon(0)
		}
		return beacon(uint64(now.UnixNano() / int64(period)))
	}
}

// options are the settings the Options make; zero fields take the
// defaults of NewPrefix, NewPrefixCore and NewAttach.
type options struct {
	Superpeers int
	Pow2       bool
	Recheck    time.Duration
	// ClientRecheck is an attached client's recheck period (default 8 ×
	// Recheck; only tests set it): its superpeer's failure shows as
	// failed renewals, and a superpeer overtaken by a closer peer refuses
	// the next renewal, so a client needs few lookups of its own, which
	// keeps a swarm's lookup load at n / (8·Recheck) per second.
	ClientRecheck time.Duration
	MinRecheck    time.Duration
	StartSpread   time.Duration
	Fraction      float64
	Puzzle        int                          // WithIDPuzzle
	Salt          func(now time.Time) [32]byte // WithSalt
	Attach        attachOptions
	capacitySet   bool
	// census sets the census's period, hold-down and expiry (zero: the
	// defaults); only tests set it.
	census censusTiming
}

// censusTiming is the census's period, hold-down, report expiry and
// confirmation time (zero: internal/census's defaults), and settle: how
// long a superpeer must have held its role under the code in use before
// it reports its load (zero: the attachment TTL).
type censusTiming struct{ every, holdDown, expire, confirmFor, settle time.Duration }

// attachOptions configure the attach protocol; see the With functions.
type attachOptions struct {
	Capacity       int
	TTL            time.Duration
	Displace       time.Duration
	Now            func() time.Time
	ProtocolPrefix protocol.ID
	Registerer     prometheus.Registerer
	// Rate and Burst are the per-peer limit of WithRateLimit (rateSet:
	// given; else the default from the TTL).
	Rate    float64
	Burst   int
	rateSet bool
}

// applyOptions is the settings of opts over the defaults.
func applyOptions(opts []Option) (options, error) {
	o := options{Attach: attachOptions{Displace: DefaultDisplace}}
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&o); err != nil {
			return o, err
		}
	}
	return o, nil
}
