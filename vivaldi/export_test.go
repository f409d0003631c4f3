package vivaldi

// Hooks of the package's tests: the model's counters, the service's model,
// a coordinate to remember, one step of the sampler, and a clock.

import (
	"context"
	"errors"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// Stats returns the model's counters.
func (c *Client) Stats() Stats { return c.counters() }

// Client is the model the service feeds.
func (s *Service) Client() *Client { return s.client }

// Remember records c as the last coordinate heard from p.
func (s *Service) Remember(p peer.ID, c Coord) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rememberLocked(p, c)
}

// Step chooses the next peer as the background sampler does (Next of the
// neighbour set, over the peer source's candidates) and samples it.
func (s *Service) Step(ctx context.Context) (peer.ID, kind, time.Duration, error) {
	p, kind, ok := s.pick()
	if !ok {
		return "", kindNone, 0, errors.New("vivaldi: no peer to sample")
	}
	rtt, err := s.sampleAs(ctx, p, kind, kind == kindProbe)
	return p, kind, rtt, err
}

// Offer hands the neighbour set a candidate, as if a peer whose RTT is via
// had offered it at coordinate c, measured at rtt (seconds).
func (s *Service) Offer(via float64, id peer.ID, c Coord, rtt float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.near.Offer(s.client.GetCoordinate(), via, []offered{{ID: string(id), Coord: c, RTT: rtt}})
}

// WithClock sets the clock of the neighbour set's timeouts and of the
// per-peer rate limit (default time.Now).
func WithClock(now func() time.Time) Option {
	return func(cfg *config) error {
		if now == nil {
			return errors.New("WithClock: nil function")
		}
		cfg.now = now
		return nil
	}
}
