package exp

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/superpeer-overlay/superpeer/experiments/latency"
	"github.com/superpeer-overlay/superpeer/experiments/report"
	"github.com/superpeer-overlay/superpeer/experiments/swarm"
	"github.com/superpeer-overlay/superpeer/repel"
	"github.com/superpeer-overlay/superpeer/superpeer"
)

// growthLive runs one method (prefix or repel) on a live swarm of
// max(LivePhases) mocknet peers, the first LivePhases[0] joined and the
// rest held back, and drives it through the phases (swarm.Grow): what
// `peer swarm --method M --fraction F` runs, on a swarm that grows and
// shrinks.
func growthLive(o Options, p growthParams, method string) (*swarm.Growth, error) {
	ctx := o.Ctx
	maxN := slices.Max(p.LivePhases)
	rtt, _, err := space(p.Latency, maxN, o.Seed)
	if err != nil {
		return nil, err
	}
	pl := rtt.(*latency.Placement)
	ramp, err := time.ParseDuration(p.LiveRamp)
	if err != nil {
		return nil, err
	}
	timeout, err := time.ParseDuration(p.LiveTimeout)
	if err != nil {
		return nil, err
	}
	ttl, err := time.ParseDuration(p.LiveTTL)
	if err != nil {
		return nil, err
	}
	logf := func(format string, args ...any) {
		fmt.Fprintf(o.Stderr, "growth live %s: "+format+"\n", append([]any{method}, args...)...)
	}
	dilate := max(1, p.LiveDilate) // runGrowth allows it for repel alone
	grace := swarm.DefaultConnGrace
	if method == "repel" {
		grace = swarm.RepelConnGrace // peer swarm's default for the method
	}
	connGrace, connSilence := swarm.DilatedConnPeriods(grace, dilate)
	s, finish, err := buildSwarm(ctx, swarm.Config{N: maxN, Seed: o.Seed, RTT: rtt, HostOf: pl.Host, Hold: maxN - p.LivePhases[0],
		ConnGrace: connGrace, ConnSilence: connSilence,
		Log: func(line string) { logf("%s", line) }}, o.Stderr)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	defer finish()
	if dilate > 1 {
		if err := s.Dilate(dilate); err != nil {
			return nil, err
		}
		logf("time dilated ×%g from here: links and timers %g times slower, figures in the network's time", dilate, dilate)
	}
	// peer swarm's defaults (its flags'), S starting where f·n puts it.
	mp := swarm.MethodParams{
		Superpeers: max(1, int(math.Round(p.LiveFraction*float64(p.LivePhases[0])))),
		Fraction:   p.LiveFraction, TTL: ttl,
		Model: repel.Attract, Survey: swarm.RepelSwarmConfig(1, repel.Attract).SurveyInterval,
		Displace: superpeer.DefaultDisplace, Probe: 3, Dissemination: repel.Piggyback,
	}
	last := time.Now()
	g := swarm.GrowOptions{
		Phases: p.LivePhases, Fraction: p.LiveFraction, Ramp: ramp, Batches: p.LiveBatches, Timeout: timeout, Seed: o.Seed + 21,
		Sampled: func(sm swarm.GrowSample) {
			if time.Since(last) < 20*time.Second {
				return
			}
			last = time.Now()
			logf("%4.0f s, phase %d: %d live, S %d (%d–%d) for f·n %.1f, %d superpeers, %d unserved, %d re-attached, %.2f msgs/peer/s",
				sm.Seconds, sm.Phase, sm.Live, sm.S, sm.SMin, sm.SMax, sm.Target, sm.Superpeers, sm.Unserved, sm.Reattached, sm.MsgsPerPeerSec)
		},
		PhaseDone: func(ph swarm.GrowPhase) {
			logf("phase %d done after %.0f s: %d live, S %d for f·n %.1f, %s; %d re-attached over %d unit steps; a client without a superpeer for at most %.1f s",
				ph.Phase, ph.Seconds, ph.Live, ph.S, ph.Target, map[bool]string{true: "converged", false: "not converged"}[ph.Converged],
				ph.Reattached, ph.UnitSteps, ph.MaxWithoutSeconds)
		},
	}
	switch method {
	case "prefix":
		// StartPrefix's spread is 20 ms a peer started together, for the
		// whole swarm (40 s at 2000): here what starts together is a batch
		// of joiners or a group's clients sent to look again by a change of
		// S, and a client waits up to the spread before it looks.
		if err := s.StartPrefix(ctx, append(mp.PrefixOptions(), superpeer.WithStartSpread(growthSpread(p)))...); err != nil {
			return nil, err
		}
		defer s.StopMethod()
	case "repel":
		vr, err := s.StartVivaldi(swarm.VivaldiOptions{Interval: swarm.VivaldiWarmInterval(len(s.Live())), Stall: time.Duration(p.LiveStallMs * float64(time.Millisecond)), Tidy: true}) // peer swarm's default for the method
		if err != nil {
			return nil, err
		}
		defer vr.Close()
		defer func() {
			if st := vr.Stalls(); st != nil {
				logf("%s", st)
			}
		}()
		vs, err := vr.WarmUp(ctx, p.LiveVivaldiBound, 0)
		if err != nil {
			return nil, err
		}
		finish()
		logf("Vivaldi median error %.3f after %.1f s (%s)", vs.Median, vs.Seconds, vs.Stopped)
		rr, err := s.StartRepel(ctx, vr, mp.RepelOptions(), nil)
		if err != nil {
			return nil, err
		}
		defer rr.Close()
		g.Repel = rr
	default:
		return nil, fmt.Errorf("growth: live method %q: want prefix or repel", method)
	}
	return s.Grow(ctx, g)
}

// growthSpread is the prefix selectors' start spread in a grown swarm:
// 20 ms a peer of the largest batch of joins or kills (at least a second),
// as StartPrefix gives the peers of a swarm started at once.
func growthSpread(p growthParams) time.Duration {
	most, n := 0, p.LivePhases[0]
	for _, m := range p.LivePhases[1:] {
		d := max(m-n, n-m)
		most = max(most, (d+p.LiveBatches-1)/p.LiveBatches)
		n = m
	}
	return max(time.Second, time.Duration(most)*20*time.Millisecond)
}

// growthLiveRows adds the live phases to the steady rows and the table,
// writes each method's time series (CSV and figure).
func growthLiveRows(o Options, r *report.Run, p growthParams, runs map[string]*swarm.Growth) ([]growthSteady, error) {
	var rows []growthSteady
	t := report.NewTable("method", "n", "f·n", "S", "S held", "at rest", "converged", "phase s", "at rest after s", "unit steps", "re-attached", "per step", "unserved at end", "max s without", "max s to first", "msgs/peer/s", "proposals / mints / moves / retired")
	for _, method := range p.LiveMethods {
		g := runs[method]
		if g == nil {
			continue
		}
		for _, ph := range g.Phases {
			conv := ph.Converged
			row := growthSteady{Method: method, Where: "live", N: ph.Live, Seed: o.Seed, Fraction: p.LiveFraction, Superpeers: ph.S, Target: ph.Target,
				Agreed: ph.Agreed, ReselectedPerChange: ph.ReattachedPerStep, UnitSteps: ph.UnitSteps, MessagesPerPeerSec: ph.MsgsPerPeerSec,
				Converged: &conv, AtRest: ph.AtRest, Reattached: ph.Reattached, PhaseSeconds: ph.Seconds, RestSeconds: ph.RestSeconds,
				MaxWithoutSeconds: ph.MaxWithoutSeconds, MaxFirstSeconds: ph.MaxFirstSeconds, Unserved: ph.Unserved,
				Proposals: int(ph.Events["counted"]), Events: ph.Events}
			rows = append(rows, row)
			held := fmt.Sprint(ph.S)
			if ph.SMin != ph.SMax {
				held = fmt.Sprintf("%d–%d (%d on another)", ph.SMin, ph.SMax, ph.Others)
			}
			events := ""
			if ev := ph.Events; ev != nil {
				events = fmt.Sprintf("%d / %d / %d / %d", ev["counted"], ev["minted"], ev["accepted"], ev["retired"])
			}
			t.Add(method, ph.Live, ph.Target, ph.S, held, ph.AtRest, ph.Converged, ph.Seconds, ph.RestSeconds, ph.UnitSteps, ph.Reattached,
				ph.ReattachedPerStep, ph.Unserved, ph.MaxWithoutSeconds, ph.MaxFirstSeconds, ph.MsgsPerPeerSec, events)
		}
		if err := growthSeries(r, p, method, g); err != nil {
			return nil, err
		}
	}
	title := fmt.Sprintf("live swarms (mocknet, %s), f = %g, %s: each phase at its end (at rest: every peer holds S and f·n is within the census band; converged: and the selection converged)",
		p.Latency, p.LiveFraction, phasesText(p.LivePhases))
	if err := printTable(o, r, "growth-live", title, t); err != nil {
		return nil, err
	}
	return rows, nil
}

// growthSeries writes a method's samples as live-METHOD.csv and its
// figure, live-METHOD.png: the count against f·n, the peers re-attached
// and unserved, the longest time a peer has gone without a superpeer, the
// messages, over time.
func growthSeries(r *report.Run, p growthParams, method string, g *swarm.Growth) error {
	kinds := []string{"dht", "attach", "vivaldi", "method"}
	header := []string{"t", "phase", "live", "target", "s", "s_min", "s_max", "others", "agreed", "at_rest", "converged", "superpeers", "unserved", "reattached", "max_without_seconds", "msgs_per_peer_second"}
	for _, k := range kinds {
		header = append(header, "msgs_"+k)
	}
	var rows [][]string
	n := len(g.Samples)
	x := make([]float64, n)
	col := func(f func(sm swarm.GrowSample) float64) []float64 {
		out := make([]float64, n)
		for i, sm := range g.Samples {
			out[i] = f(sm)
		}
		return out
	}
	for i, sm := range g.Samples {
		x[i] = sm.Seconds
		row := report.Cells(sm.Seconds, sm.Phase, sm.Live, sm.Target, sm.S, sm.SMin, sm.SMax, sm.Others, sm.Agreed, sm.AtRest, sm.Converged, sm.Superpeers, sm.Unserved, sm.Reattached, sm.MaxWithoutSeconds, sm.MsgsPerPeerSec)
		for _, k := range kinds {
			row = append(row, report.Cells(sm.MsgsByKind[k])...)
		}
		rows = append(rows, row)
	}
	if err := r.WriteCSV("live-"+method, header, rows); err != nil {
		return err
	}
	msgs := []report.Series{{Name: "all", X: x, Y: col(func(sm swarm.GrowSample) float64 { return sm.MsgsPerPeerSec })}}
	for _, k := range kinds {
		y := col(func(sm swarm.GrowSample) float64 { return sm.MsgsByKind[k] })
		if slices.Max(append(y, 0)) > 0 {
			msgs = append(msgs, report.Series{Name: k, X: x, Y: y})
		}
	}
	f := report.Figure{Title: fmt.Sprintf("%s, live: %s peers, f = %g (seed %d)", method, phasesText(p.LivePhases), p.LiveFraction, p.Seed), X: "seconds"}
	return r.Stack("live-"+method, f, []report.Panel{
		{Y: "superpeer count", Legend: "top-left", Series: []report.Series{
			{Name: "f·n", X: x, Y: col(func(sm swarm.GrowSample) float64 { return sm.Target })},
			{Name: "S most peers hold", X: x, Y: col(func(sm swarm.GrowSample) float64 { return float64(sm.S) })},
			{Name: "superpeers", X: x, Y: col(func(sm swarm.GrowSample) float64 { return float64(sm.Superpeers) })},
		}},
		{Y: "peers", Legend: "top-left", Series: []report.Series{
			{Name: "re-attached since the last sample", X: x, Y: col(func(sm swarm.GrowSample) float64 { return float64(sm.Reattached) })},
			{Name: "unserved", X: x, Y: col(func(sm swarm.GrowSample) float64 { return float64(sm.Unserved) })},
			{Name: "holding another S", X: x, Y: col(func(sm swarm.GrowSample) float64 { return float64(sm.Others) })},
		}},
		{Y: "s without a superpeer", Legend: "top-left", Series: []report.Series{
			{Name: "the most any peer served before", X: x, Y: col(func(sm swarm.GrowSample) float64 { return sm.MaxWithoutSeconds })},
		}},
		{Y: "msgs / peer / s", Legend: "top-left", Series: msgs},
	})
}

// phasesText is "100 → 500 → 100".
func phasesText(ns []int) string {
	s := ""
	for i, n := range ns {
		if i > 0 {
			s += " → "
		}
		s += fmt.Sprint(n)
	}
	return s
}
