package superpeer

// Hooks of the package's tests.

import "time"

// WithClock sets the attach protocol's clock (default time.Now).
func WithClock(now func() time.Time) Option {
	return func(o *options) error {
		if now == nil {
			return badOption("WithClock", "nil", "no clock")
		}
		o.Attach.Now = now
		return nil
	}
}

// WithClientRecheck sets how often a client that is attached looks its
// superpeer key up again (default 8 × the recheck period). Superpeers and
// unattached peers recheck every recheck period. A client needs few lookups
// of its own: its superpeer's failure shows as a failed renewal, and a
// superpeer that is overtaken by a closer peer learns it from its routing
// table and refuses the next renewal, which brings the client's lookup
// forward. This is what keeps the lookup load of a swarm of thousands of
// peers small (n / (8·recheck) lookups per second).
func WithClientRecheck(every time.Duration) Option {
	return positive("WithClientRecheck", every, func(o *options) { o.ClientRecheck = every })
}
