package repel

import (
	"time"

	"github.com/libp2p/go-libp2p/core/protocol"
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"

	"github.com/superpeer-overlay/superpeer/internal/limits"
	"github.com/superpeer-overlay/superpeer/superpeer"
)

// dropRate counts a move, survey or announce stream past its peer's rate
// (WithRateLimit), reset unread.
const dropRate = "rate"

// defaultRate is WithRateLimit's default for c: 8 streams per shortest
// of its move and announce intervals, in bursts of 16.
func defaultRate(c Config) (float64, int) {
	d := min(c.MoveInterval, c.MovingAnnounceInterval, c.AnnounceInterval)
	if d <= 0 {
		d = time.Second
	}
	return 8 / d.Seconds(), 16
}

// AddLimits adds to cfg the resource-manager limits (go-libp2p's rcmgr)
// of every protocol a peer of the token method speaks under prefix (the
// node's, dht.Node.ProtocolPrefix): the attach, census, raw-key lookup
// and coordinate exchange protocols' (superpeer.AddLimits) and its own.
// Announce: 256 streams in and 1024 out at once (a holder announces to
// every other live holder), 8 each way with any one peer; move: 32 in and
// 8 out, 2 with any one peer (one offer at a time); survey: 64 in and 256
// out, 4 with any one peer. A host built with them refuses a stream past
// these before the handler runs; what a peer may send once its streams
// are accepted is WithRateLimit's.
//
//	cfg := rcmgr.DefaultLimits
//	libp2p.SetDefaultServiceLimits(&cfg)
//	repel.AddLimits(&cfg, dht.DefaultProtocolPrefix)
//	mgr, err := rcmgr.NewResourceManager(rcmgr.NewFixedLimiter(cfg.AutoScale()))
//	// libp2p.New(libp2p.ResourceManager(mgr), ...)
func AddLimits(cfg *rcmgr.ScalingLimitConfig, prefix protocol.ID) {
	superpeer.AddLimits(cfg, prefix)
	ids := wireIDsUnder(prefix)
	limits.Add(cfg, ids.announce, limits.Streams{In: 256, Out: 1024, PeerIn: 8, PeerOut: 8, Frame: maxAnnounceSize})
	limits.Add(cfg, ids.move, limits.Streams{In: 32, Out: 8, PeerIn: 2, PeerOut: 2, Frame: maxMoveFrame})
	limits.Add(cfg, ids.survey, limits.Streams{In: 64, Out: 256, PeerIn: 4, PeerOut: 4, Frame: maxSurveyFrame})
}
