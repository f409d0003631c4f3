package limits

import (
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/superpeer-overlay/superpeer/internal/counters"
)

// Refusals counts what a go-libp2p resource manager refused, as its
// MetricsReporter (rcmgr.WithMetrics): "conn", "stream" (a stream refused
// when it opened: the system, transient or peer scope was full), "peer",
// "protocol" and "protocol-peer" (a stream refused once its protocol was
// negotiated, under "protocol <id>" and "protocol-peer <id>" too),
// "service", "service-peer" and "memory". The zero value is ready.
type Refusals struct{ set counters.Set }

// Snapshot is a copy of the counts, the caller's to keep.
func (r *Refusals) Snapshot() map[string]uint64 { return r.set.Snapshot() }

func (r *Refusals) AllowConn(network.Direction, bool)      {}
func (r *Refusals) BlockConn(network.Direction, bool)      { r.set.Add("conn", 1) }
func (r *Refusals) AllowStream(peer.ID, network.Direction) {}
func (r *Refusals) BlockStream(peer.ID, network.Direction) { r.set.Add("stream", 1) }
func (r *Refusals) AllowPeer(peer.ID)                      {}
func (r *Refusals) BlockPeer(peer.ID)                      { r.set.Add("peer", 1) }
func (r *Refusals) AllowProtocol(protocol.ID)              {}
func (r *Refusals) BlockProtocol(p protocol.ID) {
	r.set.Add("protocol", 1)
	r.set.Add("protocol "+string(p), 1)
}
func (r *Refusals) BlockProtocolPeer(p protocol.ID, _ peer.ID) {
	r.set.Add("protocol-peer", 1)
	r.set.Add("protocol-peer "+string(p), 1)
}
func (r *Refusals) AllowService(string)              {}
func (r *Refusals) BlockService(string)              { r.set.Add("service", 1) }
func (r *Refusals) BlockServicePeer(string, peer.ID) { r.set.Add("service-peer", 1) }
func (r *Refusals) AllowMemory(int)                  {}
func (r *Refusals) BlockMemory(int)                  { r.set.Add("memory", 1) }
