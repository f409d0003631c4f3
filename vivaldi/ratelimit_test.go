package vivaldi

import (
	"context"
	"sync"
	"testing"
	"time"

	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"
)

type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *testClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// Requests from one peer past WithRateLimit are reset unread and counted
// under "rate", on the service's clock; those within the bucket are
// answered, and another peer has a bucket of its own.
func TestService_RateLimitPerPeer(t *testing.T) {
	_, hs := mockHosts(t, 3)
	clock := &testClock{now: time.Unix(1000, 0)}
	s0 := newService(t, hs[0], WithInterval(0), WithClock(clock.Now), WithRateLimit(1, 3))
	s1 := newService(t, hs[1], WithInterval(0))
	s2 := newService(t, hs[2], WithInterval(0))
	ctx := context.Background()
	sample := func(s *Service, n int) (ok int) {
		for range n {
			if _, err := s.Sample(ctx, hs[0].ID()); err == nil {
				ok++
			}
		}
		return ok
	}
	if got := sample(s1, 10); got != 3 || s0.Drops()["rate"] != 7 {
		t.Fatalf("10 requests at one instant: %d answered, %d rate drops; want 3 and 7", got, s0.Drops()["rate"])
	}
	if got := sample(s2, 3); got != 3 || s0.Drops()["rate"] != 7 {
		t.Fatalf("another peer: %d answered, %d rate drops; want 3 and 7", got, s0.Drops()["rate"])
	}
	clock.Add(2 * time.Second)
	if got := sample(s1, 5); got != 2 || s0.Drops()["rate"] != 10 {
		t.Fatalf("2 s later: %d answered, %d rate drops; want 2 and 10", got, s0.Drops()["rate"])
	}
	// The server counts a request served once its answer is written: the
	// client may hold the answer a moment before the count moves.
	deadline := time.Now().Add(10 * time.Second)
	for s0.Stats().Served < 8 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if served := s0.Stats().Served; served != 8 {
		t.Errorf("%d served, want 8", served)
	}
}

// The default limit follows the sampling interval: 4 an interval, at
// least 10 a second, in bursts of twice that; (0, 0) is no limit.
func TestService_DefaultRateLimit(t *testing.T) {
	_, hs := mockHosts(t, 1)
	for _, c := range []struct {
		interval time.Duration
		rate     float64
		burst    int
	}{{10 * time.Second, 10, 20}, {0, 10, 20}, {20 * time.Millisecond, 200, 400}} {
		s := newService(t, hs[0], WithInterval(c.interval))
		if s.limit.Rate() != c.rate || s.limit.Burst() != c.burst {
			t.Errorf("interval %v: rate %v burst %d, want %v and %d", c.interval, s.limit.Rate(), s.limit.Burst(), c.rate, c.burst)
		}
		s.Close()
	}
	if s := newService(t, hs[0], WithInterval(0), WithRateLimit(0, 0)); s.limit != nil {
		t.Error("WithRateLimit(0, 0): a limit")
	}
	for _, bad := range []Option{WithRateLimit(-1, 1), WithRateLimit(2, 0)} {
		if _, err := NewService(hs[0], bad); err == nil {
			t.Error("bad WithRateLimit accepted")
		}
	}
}

func TestAddLimits(t *testing.T) {
	cfg := rcmgr.DefaultLimits
	AddLimits(&cfg, "/x")
	pl := cfg.Scale(8<<30, 1024).ToPartialLimitConfig()
	if got := pl.ProtocolPeer["/x/vivaldi/1.0.0"].StreamsInbound; got != 8 || len(cfg.ProtocolLimits) != 1 {
		t.Errorf("%v inbound streams a peer (want 8), %d protocols (want 1)", got, len(cfg.ProtocolLimits))
	}
}
