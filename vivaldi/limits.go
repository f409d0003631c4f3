package vivaldi

import (
	"github.com/libp2p/go-libp2p/core/protocol"
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"

	"github.com/superpeer-overlay/superpeer/internal/limits"
)

// dropRate counts a request past its peer's rate (WithRateLimit), reset
// unread.
const dropRate = "rate"

// AddLimits adds to cfg the resource-manager limits (go-libp2p's rcmgr)
// of the coordinate exchange under prefix (WithProtocolPrefix): at most
// 256 exchanges answered and 128 asked at once, 8 each way with any one
// peer (a service has WithMaxInFlight samples of its own in flight, and a
// repel peer a few probes); the host refuses a stream past that before the
// handler runs. superpeer.AddLimits and repel.AddLimits add these too.
func AddLimits(cfg *rcmgr.ScalingLimitConfig, prefix protocol.ID) {
	limits.Add(cfg, exchangeProtocol(prefix), limits.Streams{In: 256, Out: 128, PeerIn: 8, PeerOut: 8, Frame: maxFrameSize})
}
