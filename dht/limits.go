package dht

import (
	"github.com/libp2p/go-libp2p/core/protocol"
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"

	"github.com/superpeer-overlay/superpeer/internal/limits"
)

// AddLimits adds to cfg the resource-manager limits (go-libp2p's rcmgr)
// of the raw-key lookup, <prefix>/kad/closest/1.0.0: at most 256 streams
// in and 256 out at once, 16 each way with any one peer. A host built
// with them refuses a peer's streams past that before a handler runs
// (kad-dht's own protocol keeps go-libp2p's default limits). prefix is
// the node's (WithProtocolPrefix; DefaultProtocolPrefix by default).
// superpeer.AddLimits and repel.AddLimits add these too.
//
//	cfg := rcmgr.DefaultLimits
//	libp2p.SetDefaultServiceLimits(&cfg)
//	dht.AddLimits(&cfg, dht.DefaultProtocolPrefix)
//	mgr, err := rcmgr.NewResourceManager(rcmgr.NewFixedLimiter(cfg.AutoScale()))
//	// libp2p.New(libp2p.ResourceManager(mgr), ...)
func AddLimits(cfg *rcmgr.ScalingLimitConfig, prefix protocol.ID) {
	limits.Add(cfg, prefix+"/kad/closest/1.0.0", limits.Streams{In: 256, Out: 256, PeerIn: 16, PeerOut: 16, Frame: maxClosestResponse})
}
