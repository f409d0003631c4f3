package dht

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/superpeer-overlay/superpeer/internal/counters"
)

// WithRegisterer exports the node's metrics (superpeer_dht_*: lookups, the
// raw-key protocol's requests, refused frames by reason, the routing
// table's size) on reg, read from Stats at every scrape, until Close. By
// default nothing is registered. Several nodes may register on one reg:
// their values add up.
func WithRegisterer(reg prometheus.Registerer) Option {
	return func(c *config) error {
		if reg == nil {
			return errors.New("dht.WithRegisterer: nil registerer")
		}
		c.reg = reg
		return nil
	}
}

// The node's metric families, in the order report emits them.
var metricFamilies = []counters.Family{
	{Name: "superpeer_dht_lookups_total", Help: "Lookups started, kad-dht's (LookupName) and raw-key (Closest).", Kind: counters.Counter},
	{Name: "superpeer_dht_lookup_errors_total", Help: "Lookups that failed.", Kind: counters.Counter},
	{Name: "superpeer_dht_closest_requests_total", Help: "Requests of the raw-key lookup protocol, by direction: served (answered) or sent.", Kind: counters.Counter, Label: "dir"},
	{Name: "superpeer_dht_closest_failures_total", Help: "Raw-key requests sent that got no valid answer in time.", Kind: counters.Counter},
	{Name: "superpeer_dht_closest_called_off_total", Help: "Raw-key requests still out when their lookup had its answer, called off.", Kind: counters.Counter},
	{Name: "superpeer_dht_kad_requests_sent_total", Help: "kad-dht requests sent with the one-stream-per-request sender.", Kind: counters.Counter},
	{Name: "superpeer_dht_drops_total", Help: "Frames of the raw-key lookup protocol refused, by reason.", Kind: counters.Counter, Label: "reason"},
	{Name: "superpeer_dht_routing_table_peers", Help: "Peers in kad-dht's routing table.", Kind: counters.Gauge},
}

// report emits the node's metrics (metricFamilies).
func (n *Node) report(emit counters.Emit) {
	s := n.stats
	emit(0, "", float64(s.Lookups.Load()))
	emit(1, "", float64(s.LookupErrors.Load()))
	emit(2, "in", float64(s.ClosestServed.Load()))
	emit(2, "out", float64(s.ClosestSent.Load()))
	emit(3, "", float64(s.ClosestFailed.Load()))
	emit(4, "", float64(s.ClosestCancelled.Load()))
	emit(5, "", float64(s.KadSent.Load()))
	counters.EmitAll(emit, 6, s.Drops(), dropDecode, dropBadTarget, dropBadPeer, dropBadAddress, dropLost)
	emit(7, "", float64(n.kad.RoutingTable().Size()))
}
