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
