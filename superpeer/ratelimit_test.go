package superpeer

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/protocol"
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"
)

// A peer that asks faster than WithRateLimit lets it is refused unread,
// each refusal counted under "rate", on the attach protocol's clock; the
// requests within the bucket are served, and another peer has a bucket of
// its own.
func TestAttach_RateLimitPerPeer(t *testing.T) {
	hs := hosts(t, 3)
	clock := &fakeClock{now: time.Unix(1000, 0)}
	as := attachAll(t, hs, WithClock(clock.Now), WithRateLimit(1, 3))
	sp := as[0]
	sp.SetRole(asRole(Superpeer, hs[0].ID()))
	ctx := context.Background()
	ask := func(c *Attach, n int) (ok int) {
		for range n {
			if ans, err := c.Request(ctx, hs[0].ID(), false, nil, 0); err == nil && ans.Status == Accepted {
				ok++
			}
		}
		return ok
	}
	if got := ask(as[1], 10); got != 3 || sp.Drops()["rate"] != 7 {
		t.Fatalf("10 requests at one instant: %d served, %d rate drops; want 3 and 7", got, sp.Drops()["rate"])
	}
	if got := ask(as[2], 4); got != 3 || sp.Drops()["rate"] != 8 {
		t.Fatalf("another peer: %d served, %d rate drops; want its own 3, and 8", got, sp.Drops()["rate"])
	}
	clock.Add(2 * time.Second)
	if got := ask(as[1], 5); got != 2 || sp.Drops()["rate"] != 11 {
		t.Fatalf("2 s later: %d served, %d rate drops; want 2 and 11", got, sp.Drops()["rate"])
	}
	if served := sp.Stats.Served.Load(); served != 8 {
		t.Errorf("%d requests read, want the 8 let through", served)
	}
	// Off: every request is served.
	hs2 := hosts(t, 2)
	as2 := attachAll(t, hs2, WithClock(clock.Now), WithRateLimit(0, 0))
	as2[0].SetRole(asRole(Superpeer, hs2[0].ID()))
	for i := range 50 {
		if ans, err := as2[1].Request(ctx, hs2[0].ID(), false, nil, 0); err != nil || ans.Status != Accepted {
			t.Fatalf("no limit, request %d: %+v, %v", i, ans, err)
		}
	}
}

// The default limit follows the TTL: 8 per TTL, at least 1 a second, in
// bursts of 8.
func TestAttach_DefaultRateLimit(t *testing.T) {
	for _, c := range []struct {
		ttl  time.Duration
		rate float64
	}{{30 * time.Second, 1}, {2 * time.Second, 4}, {100 * time.Millisecond, 80}} {
		as := attachAll(t, hosts(t, 1), WithTTL(c.ttl))
		if as[0].limit.Rate() != c.rate || as[0].limit.Burst() != 8 || as[0].censusLimit.Rate() != c.rate {
			t.Errorf("TTL %v: rate %v burst %d, want %v and 8", c.ttl, as[0].limit.Rate(), as[0].limit.Burst(), c.rate)
		}
	}
	for _, bad := range []Option{WithRateLimit(-1, 1), WithRateLimit(1, 0)} {
		if _, err := NewAttach(hosts(t, 1)[0], bad); !errors.Is(err, ErrOption) {
			t.Errorf("bad WithRateLimit: %v, want ErrOption", err)
		}
	}
}

// The census protocol has its own bucket per peer: digests past it are
// reset unread and counted under "census-rate".
func TestCensus_RateLimitPerPeer(t *testing.T) {
	hs := hosts(t, 2)
	clock := &fakeClock{now: time.Unix(1000, 0)}
	as := attachAll(t, hs, WithClock(clock.Now), WithRateLimit(0.5, 2))
	id := protocol.ID("/test/census/1.0.0")
	box0, _ := newCensusBox(0.1, hs[0].ID(), 3, 0, censusTiming{})
	box1, _ := newCensusBox(0.1, hs[1].ID(), 3, 0, censusTiming{})
	hs[0].SetStreamHandler(id, as[0].handleCensus(box0))
	ok := 0
	for range 6 {
		if as[1].exchangeCensus(context.Background(), id, hs[0].ID(), box1) == nil {
			ok++
		}
	}
	if d := as[0].Drops(); ok != 2 || d["census-rate"] != 4 || d["rate"] != 0 {
		t.Fatalf("6 digests: %d exchanged, drops %v; want 2 and census-rate 4", ok, d)
	}
}

// AddLimits sets every protocol's limits, and those of the lookup and the
// coordinate exchange beneath them, under the prefix given.
func TestAddLimits(t *testing.T) {
	cfg := rcmgr.DefaultLimits
	AddLimits(&cfg, "/x")
	want := []protocol.ID{"/x/attach/1.0.0", "/x/census/1.0.0", "/x/kad/closest/1.0.0", "/x/vivaldi/1.0.0"}
	if len(cfg.ProtocolLimits) != len(want) || len(cfg.ProtocolPeerLimits) != len(want) {
		t.Fatalf("%d protocol and %d protocol-peer limits, want %d", len(cfg.ProtocolLimits), len(cfg.ProtocolPeerLimits), len(want))
	}
	c := cfg.Scale(8<<30, 1024)
	for _, id := range want {
		if _, ok := cfg.ProtocolLimits[id]; !ok {
			t.Errorf("no limit for %s", id)
		}
	}
	pl := c.ToPartialLimitConfig()
	if got := pl.ProtocolPeer["/x/attach/1.0.0"].StreamsInbound; got != 4 {
		t.Errorf("attach: %v inbound streams a peer, want 4", got)
	}
	if got := pl.Protocol["/x/census/1.0.0"].StreamsInbound; got != 32 {
		t.Errorf("census: %v inbound streams, want 32", got)
	}
	if rcmgr.DefaultLimits.ProtocolLimits != nil {
		t.Error("AddLimits changed rcmgr.DefaultLimits")
	}
}
