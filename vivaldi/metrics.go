package vivaldi

import "github.com/superpeer-overlay/superpeer/internal/counters"

// The service's metric families (WithRegisterer), in the order report
// emits them.
var metricFamilies = []counters.Family{
	{Name: "superpeer_vivaldi_error_ratio", Help: "The coordinate's relative error estimate (Config.ErrorMax, 1.5 by default, before any sample); the mean over the services registered.", Kind: counters.MeanGauge},
	{Name: "superpeer_vivaldi_samples_total", Help: "Coordinate exchanges this peer started, by result: ok (an RTT sample) or failed.", Kind: counters.Counter, Label: "result"},
	{Name: "superpeer_vivaldi_requests_served_total", Help: "Coordinate exchanges this peer answered.", Kind: counters.Counter},
	{Name: "superpeer_vivaldi_drops_total", Help: "Frames and neighbour entries refused, by reason.", Kind: counters.Counter, Label: "reason"},
}

// dropReasons are the reasons whose series exist from the start.
var dropReasons = []string{
	dropOversize, dropDecode, dropNoCoord, dropNonFinite, dropOutOfRange, dropDimensions, dropStream, dropRate,
	dropNeighborID, dropNeighborCoord, dropNeighborRTT, dropNeighborAddr, dropNeighborExcess, dropNeighborDup, dropPiggyback,
	dropImplausible, dropRescaled, dropStalled,
}

// report emits the service's metrics (metricFamilies).
func (s *Service) report(emit counters.Emit) {
	emit(0, "", s.client.GetCoordinate().Error)
	s.mu.Lock()
	ok, failed, served := s.ok, s.failed, s.served
	s.mu.Unlock()
	emit(1, "ok", float64(ok))
	emit(1, "failed", float64(failed))
	emit(2, "", float64(served))
	counters.EmitAll(emit, 3, s.drops.Snapshot(), dropReasons...)
}
