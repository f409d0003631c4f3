// Package peerhost is what `peer run` builds its host with, shared with
// the experiments that stand in for a `peer run` peer (experiments/flood):
// its resource manager.
package peerhost

import (
	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/network"
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"

	"github.com/superpeer-overlay/superpeer/dht"
	"github.com/superpeer-overlay/superpeer/internal/limits"
	"github.com/superpeer-overlay/superpeer/repel"
)

// ResourceManager is the resource manager of a `peer run` host:
// go-libp2p's default limits scaled to the machine, with its own
// services' (what libp2p.New makes by default), and unless defaultsOnly
// those of every protocol of ours under the default prefix
// (repel.AddLimits: the lookup, attach, census, Vivaldi, and the token
// method's announce, move and survey). What it refuses is counted in
// refused (nil: not counted) and, with trace, in go-libp2p's
// libp2p_rcmgr_* series.
func ResourceManager(refused *limits.Refusals, trace, defaultsOnly bool) (network.ResourceManager, error) {
	cfg := rcmgr.DefaultLimits
	libp2p.SetDefaultServiceLimits(&cfg)
	if !defaultsOnly {
		repel.AddLimits(&cfg, dht.DefaultProtocolPrefix)
	}
	var opts []rcmgr.Option
	if refused != nil {
		opts = append(opts, rcmgr.WithMetrics(refused))
	}
	if trace {
		str, err := rcmgr.NewStatsTraceReporter()
		if err != nil {
			return nil, err
		}
		opts = append(opts, rcmgr.WithTraceReporter(str))
	}
	return rcmgr.NewResourceManager(rcmgr.NewFixedLimiter(cfg.AutoScale()), opts...)
}
