package repel

import "github.com/superpeer-overlay/superpeer/internal/counters"

// The selector's metric families (WithRegisterer), in the
// order report emits them.
var metricFamilies = []counters.Family{
	{Name: "superpeer_repel_token_events_total", Help: "What happened to this peer's token, by event (EventKind): minted, accepted, move-offered, moved-away, move-timed-out, move-refused, fenced, settled, site-shared, survey, survey-moved, survey-refused, survey-kept, retired, counted, untraced, reverted, region-moved, coord-misfit.", Kind: counters.Counter, Label: "event"},
	{Name: "superpeer_repel_tokens_held", Help: "1 while this peer holds a token, settled or not.", Kind: counters.Gauge},
	{Name: "superpeer_repel_tokens_known", Help: "Token versions this peer has heard of within T_dead; the mean over the selectors registered.", Kind: counters.MeanGauge},
	{Name: "superpeer_repel_token_lookups_total", Help: "Lookups of silent tokens' names (to decide who mints).", Kind: counters.Counter},
	{Name: "superpeer_repel_sent_bytes_total", Help: "Bytes sent, by what carried them: announce (direct or GossipSub announcements), move, survey, gossip (piggybacks on the Vivaldi exchanges).", Kind: counters.Counter, Label: "kind"},
	{Name: "superpeer_repel_drops_total", Help: "Announcements, gossip, move and survey frames refused, by reason.", Kind: counters.Counter, Label: "reason"},
}

// dropReasons are the reasons whose series exist from the start.
var dropReasons = []string{
	dropDecode, dropHolder, dropNotHolder, dropOutOfRange, dropCoord, dropDigest, dropFrameType, dropWrite, dropStep, dropSurvey,
	dropGossip, dropSignature, dropRate, dropCount, dropCert,
}

// report emits the selector's metrics (metricFamilies).
func (s *Selector) report(emit counters.Emit) {
	stats := s.stats.Snapshot()
	for _, k := range EventKinds() {
		emit(0, k.String(), float64(stats[k.String()]))
	}
	s.mu.Lock()
	held, known := s.snap.holding, len(s.snap.live)
	s.mu.Unlock()
	v := 0.0
	if held {
		v = 1
	}
	emit(1, "", v)
	emit(2, "", float64(known))
	emit(3, "", float64(stats[statLookups]))
	emit(4, "announce", float64(stats[statAnnounceBytes]))
	emit(4, "move", float64(stats[statMoveBytes]))
	emit(4, "survey", float64(stats[statSurveyBytes]))
	emit(4, "gossip", float64(stats[statGossipBytes]))
	counters.EmitAll(emit, 5, s.drops.Snapshot(), dropReasons...)
}
