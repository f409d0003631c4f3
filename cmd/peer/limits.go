package main

import (
	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/network"
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"

	"github.com/superpeer-overlay/superpeer/dht"
	"github.com/superpeer-overlay/superpeer/internal/limits"
	"github.com/superpeer-overlay/superpeer/repel"
)

// resourceManager is the resource manager of a `peer run` host:
// go-libp2p's default limits (scaled to the machine, with its own
// services'), and those of every protocol of ours under the default
// prefix (repel.AddLimits: the lookup, attach, census, Vivaldi, and the
// token method's announce, move and survey). What it refuses is counted
// in refused (shown in /status as rcmgr/…) and, with metrics, in
// go-libp2p's libp2p_rcmgr_* series.
func resourceManager(refused *limits.Refusals, metrics bool) (network.ResourceManager, error) {
	cfg := rcmgr.DefaultLimits
	libp2p.SetDefaultServiceLimits(&cfg)
	repel.AddLimits(&cfg, dht.DefaultProtocolPrefix)
	opts := []rcmgr.Option{rcmgr.WithMetrics(refused)}
	if metrics {
		str, err := rcmgr.NewStatsTraceReporter()
		if err != nil {
			return nil, err
		}
		opts = append(opts, rcmgr.WithTraceReporter(str))
	}
	return rcmgr.NewResourceManager(rcmgr.NewFixedLimiter(cfg.AutoScale()), opts...)
}
