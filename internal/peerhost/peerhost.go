// Package peerhost is what `peer run` builds its host with, shared with
// the experiments that stand in for a `peer run` peer (experiments/flood):
// its resource manager.
package peerhost

import (
	"math"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/network"
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"

	"github.com/superpeer-overlay/superpeer/dht"
	"github.com/superpeer-overlay/superpeer/internal/limits"
	"github.com/superpeer-overlay/superpeer/repel"
)

// PeerStreamsInbound is the most streams one peer may have open to a
// `peer run` host at once, over all protocols and those still
// negotiating theirs. go-libp2p's default (256, and 128 more a GiB of
// the memory the limits scale to) is above its transient scope's (128,
// and 128 more a GiB), which holds every stream until its protocol is
// negotiated (up to 10 s): one peer opening streams that never name a
// protocol fills the transient scope, and every other peer's new
// streams are refused until they time out.
const PeerStreamsInbound = 128

// ResourceManager is the resource manager of a `peer run` host:
// go-libp2p's default limits scaled to the machine, with its own
// services' (what libp2p.New makes by default), and unless defaultsOnly
// those of every protocol of ours under the default prefix
// (repel.AddLimits: the lookup, attach, census, Vivaldi, and the token
// method's announce, move and survey) and at most PeerStreamsInbound
// streams in from one peer. What it refuses is counted in refused (nil:
// not counted) and, with trace, in go-libp2p's libp2p_rcmgr_* series.
// extra are further rcmgr options (WithoutIPLimits).
func ResourceManager(refused *limits.Refusals, trace, defaultsOnly bool, extra ...rcmgr.Option) (network.ResourceManager, error) {
	cfg := rcmgr.DefaultLimits
	libp2p.SetDefaultServiceLimits(&cfg)
	if !defaultsOnly {
		repel.AddLimits(&cfg, dht.DefaultProtocolPrefix)
		cfg.PeerBaseLimit.StreamsInbound, cfg.PeerLimitIncrease.StreamsInbound = PeerStreamsInbound, 0
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
	return rcmgr.NewResourceManager(rcmgr.NewFixedLimiter(cfg.AutoScale()), append(opts, extra...)...)
}

// WithoutIPLimits lifts go-libp2p's limit of concurrent connections from
// one address (8 per IPv4 address; 8 per IPv6 /56 and 64 per /48, both
// lifted, since the option replaces the list; loopback exempt): a
// swarm process puts hundreds of peers behind one address, and those of
// another process reaching it from another address, or another machine,
// would be refused past the eighth.
func WithoutIPLimits() rcmgr.Option {
	return rcmgr.WithLimitPerSubnet(
		[]rcmgr.ConnLimitPerSubnet{{PrefixLength: 32, ConnCount: math.MaxInt}},
		[]rcmgr.ConnLimitPerSubnet{{PrefixLength: 56, ConnCount: math.MaxInt}},
	)
}
