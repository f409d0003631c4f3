package repel

import (
	"context"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/protocol"
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"

	"github.com/superpeer-overlay/superpeer/dht"
	"github.com/superpeer-overlay/superpeer/superpeer"
)

// One bucket per peer covers the move, survey and announce streams: past
// it a stream is reset unread and counted under "rate"; the frames within
// it are read (here, garbage: decode drops). The bucket refills at 0.001
// a second, so none refills during the test.
func TestSelector_RateLimitPerPeer(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mn, err := mocknet.FullMeshConnected(2)
	if err != nil {
		t.Fatal(err)
	}
	defer mn.Close()
	hs := mn.Hosts()
	node, err := dht.New(ctx, hs[0], dht.WithProtocolPrefix("/test"))
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	cfg := LocalConfig()
	cfg.DeadAfter = time.Minute // nobody mints during the test
	sel, err := NewSelector(node, WithConfig(cfg), WithRateLimit(0.001, 3), WithAttach(superpeer.WithTTL(2*time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	defer sel.Close()
	if err := sel.Start(ctx); err != nil {
		t.Fatal(err)
	}
	garbage := []byte{0x05, 0xff, 0xff, 0xff, 0xff, 0xff}
	for range 6 {
		sendOn(t, hs[1], hs[0].ID(), testIDs.survey, garbage)
	}
	for range 2 {
		sendOn(t, hs[1], hs[0].ID(), testIDs.move, garbage)
		sendOn(t, hs[1], hs[0].ID(), testIDs.announce, garbage)
	}
	waitUntil(t, 5*time.Second, "10 frames counted", func() bool {
		d := sel.Drops()
		return d[dropDecode]+d[dropRate] == 10
	})
	if d := sel.Drops(); d[dropDecode] != 3 || d[dropRate] != 7 {
		t.Fatalf("drops %v, want decode 3 and rate 7", d)
	}
}

func TestSelector_DefaultRateLimit(t *testing.T) {
	for _, c := range []struct {
		cfg   Config
		rate  float64
		burst int
	}{{DefaultConfig(), 8.0 / 5, 16}, {LocalConfig(), 40, 16}} {
		var o selectorOptions
		o.Config = c.cfg
		if err := o.defaults(); err != nil {
			t.Fatal(err)
		}
		if o.Rate != c.rate || o.Burst != c.burst {
			t.Errorf("rate %v burst %d, want %v and %d", o.Rate, o.Burst, c.rate, c.burst)
		}
	}
	o := selectorOptions{}
	for _, opt := range []Option{WithRateLimit(-1, 1), WithRateLimit(1, 0)} {
		if err := opt(&o); err == nil {
			t.Error("bad WithRateLimit accepted")
		}
	}
	if err := WithRateLimit(0, 0)(&o); err != nil || o.defaults() != nil || o.Rate != 0 {
		t.Errorf("WithRateLimit(0, 0): %v, rate %v", err, o.Rate)
	}
}

// AddLimits covers every protocol of a repel peer under the prefix.
func TestAddLimits(t *testing.T) {
	cfg := rcmgr.DefaultLimits
	AddLimits(&cfg, "/x")
	if len(cfg.ProtocolLimits) != 7 || len(cfg.ProtocolPeerLimits) != 7 {
		t.Fatalf("%d protocols, want 7: %v", len(cfg.ProtocolLimits), cfg.ProtocolLimits)
	}
	pl := cfg.Scale(8<<30, 1024).ToPartialLimitConfig()
	for id, in := range map[string]int{"/x/repel/move/1.0.0": 2, "/x/repel/survey/1.0.0": 4, "/x/repel/announce/1.0.0": 8, "/x/attach/1.0.0": 4} {
		if got := pl.ProtocolPeer[protocol.ID(id)].StreamsInbound; int(got) != in {
			t.Errorf("%s: %v inbound streams a peer, want %d", id, got, in)
		}
	}
}
