package superpeer

import (
	"github.com/libp2p/go-libp2p/core/protocol"
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"

	"github.com/superpeer-overlay/superpeer/dht"
	"github.com/superpeer-overlay/superpeer/internal/limits"
	"github.com/superpeer-overlay/superpeer/vivaldi"
)

// AddLimits adds to cfg the resource-manager limits (go-libp2p's rcmgr)
// of the attach and census protocols under prefix (the node's,
// dht.Node.ProtocolPrefix), and those of the protocols beneath them, the
// raw-key lookup (dht.AddLimits) and the coordinate exchange
// (vivaldi.AddLimits). A host built with them refuses a stream past its
// protocol's limits before the handler runs; what a peer may ask once its
// streams are accepted is WithRateLimit's. Attach: 256 requests served
// and 32 sent at once, 4 each way with any one peer (a client has one
// request or renewal in flight to its superpeer); census: 32 and 8, 2 with
// any one peer (an exchange every 5 s). For a host of the token method,
// repel.AddLimits adds these and its own.
//
//	cfg := rcmgr.DefaultLimits
//	libp2p.SetDefaultServiceLimits(&cfg)
//	superpeer.AddLimits(&cfg, dht.DefaultProtocolPrefix) // the prefix the node will have
//	mgr, err := rcmgr.NewResourceManager(rcmgr.NewFixedLimiter(cfg.AutoScale()))
//	// libp2p.New(libp2p.ResourceManager(mgr), ...)
func AddLimits(cfg *rcmgr.ScalingLimitConfig, prefix protocol.ID) {
	dht.AddLimits(cfg, prefix)
	vivaldi.AddLimits(cfg, prefix)
	limits.Add(cfg, attachProtocol(prefix), limits.Streams{In: 256, Out: 32, PeerIn: 4, PeerOut: 4, Frame: maxAttachFrame})
	limits.Add(cfg, censusProtocol(prefix), limits.Streams{In: 32, Out: 8, PeerIn: 2, PeerOut: 2, Frame: maxCensusFrame})
}
