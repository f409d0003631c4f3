package limits

import (
	"github.com/libp2p/go-libp2p/core/protocol"
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"
)

// Streams is what one protocol may hold open in go-libp2p's resource
// manager: at most In inbound and Out outbound streams at once over all
// peers, PeerIn and PeerOut with any one peer. Frame is the protocol's
// frame cap, which sets the scopes' memory (streams × Frame): our handlers
// read one capped frame a stream and reserve nothing on the scopes
// themselves, so their memory is bounded by the stream counts.
type Streams struct {
	In, Out, PeerIn, PeerOut int
	Frame                    int
}

// Add sets id's protocol and protocol-peer limits in cfg to s, the same
// whatever the memory the limits are scaled to.
func Add(cfg *rcmgr.ScalingLimitConfig, id protocol.ID, s Streams) {
	cfg.AddProtocolLimit(id, rcmgr.BaseLimit{
		StreamsInbound: s.In, StreamsOutbound: s.Out, Streams: s.In + s.Out,
		Memory: int64(s.In+s.Out) * int64(s.Frame),
	}, rcmgr.BaseLimitIncrease{})
	cfg.AddProtocolPeerLimit(id, rcmgr.BaseLimit{
		StreamsInbound: s.PeerIn, StreamsOutbound: s.PeerOut, Streams: s.PeerIn + s.PeerOut,
		Memory: int64(s.PeerIn+s.PeerOut) * int64(s.Frame),
	}, rcmgr.BaseLimitIncrease{})
}
