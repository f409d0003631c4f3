package exp

import (
	"errors"
	"fmt"
	"time"

	"github.com/superpeer-overlay/superpeer/experiments/latency"
	"github.com/superpeer-overlay/superpeer/experiments/metrics"
	"github.com/superpeer-overlay/superpeer/experiments/report"
	"github.com/superpeer-overlay/superpeer/experiments/sim"
	"github.com/superpeer-overlay/superpeer/experiments/swarm"
	"github.com/superpeer-overlay/superpeer/superpeer"
)

func init() {
	register(Experiment{
		Name:    "scale",
		Summary: "live swarm memory and convergence time vs n; simulator time and memory vs n (prefix to 10^6, Vivaldi + repel to 10^5)",
		run:     runScale,
	})
}

type scaleParams struct {
	common
	Latency       string `json:"latency"`
	LiveN         []int  `json:"live_n"`
	S             int    `json:"s"`
	PrefixN       []int  `json:"prefix_n"`
	PrefixS       int    `json:"prefix_s"`
	PrefixSpace   string `json:"prefix_space"`
	RepelN        []int  `json:"repel_n"`
	RepelS        int    `json:"repel_s"`
	RepelSpace    string `json:"repel_space"`
	VivaldiRounds int    `json:"vivaldi_rounds"`
	// SelectTimeout bounds each live swarm's wait for its selection.
	SelectTimeout time.Duration `json:"select_timeout_ns"`
}

type liveScaleRow struct {
	N               int     `json:"n"`
	BuildSeconds    float64 `json:"build_seconds"`
	ConvergeSeconds float64 `json:"converge_seconds"`
	SelectSeconds   float64 `json:"select_seconds"`
	RSSMiB          float64 `json:"rss_mib"`
	MiBPerPeer      float64 `json:"mib_per_peer"`
	Goroutines      int     `json:"goroutines"`
	Superpeers      int     `json:"superpeers"`
	// SelectConverged is false when the selection had not converged after
	// SelectTimeout; WrongAtEnd counts the peers still in a wrong state.
	SelectConverged bool `json:"select_converged"`
	WrongAtEnd      int  `json:"wrong_at_end"`
}

type simScaleRow struct {
	Method      string  `json:"method"`
	N           int     `json:"n"`
	Seconds     float64 `json:"seconds"`
	PhaseSecs   string  `json:"phases"`
	RSSMiB      float64 `json:"rss_mib"`
	PeakRSSMiB  float64 `json:"peak_rss_mib"`
	Superpeers  int     `json:"superpeers"`
	ClientRTT   float64 `json:"client_rtt_mean_ms"`
	Events      uint64  `json:"events"`
	Settled     *bool   `json:"settled,omitempty"`
	VirtualSecs float64 `json:"virtual_seconds,omitempty"`
	VivMedian   float64 `json:"vivaldi_median_error,omitempty"`
}

func runScale(o Options, r *report.Run) error {
	p := scaleParams{common: commonOf(o), Latency: latency.Default, S: 16,
		PrefixS: 64, PrefixSpace: latency.Default, RepelS: 64, RepelSpace: "synthetic:clusters", SelectTimeout: 3 * time.Minute}
	if o.Quick {
		p.LiveN = []int{50, 100}
		p.PrefixN = []int{1000, 10_000, 100_000}
		p.RepelN = []int{1000, 5000}
		p.VivaldiRounds = 50
	} else {
		p.LiveN = []int{100, 300, 1000, 2000}
		p.PrefixN = []int{1000, 10_000, 100_000, 1_000_000}
		p.RepelN = []int{1000, 10_000, 100_000}
		p.VivaldiRounds = 100
	}
	// Simulator first: it needs no swarm, and its peak RSS is its own.
	st := report.NewTable("method", "peers", "seconds", "RSS MiB", "peak RSS MiB", "superpeers", "client RTT mean", "events", "phases")
	var simRows []simScaleRow
	for _, n := range p.PrefixN {
		freeMemory()
		start := time.Now()
		bar := report.NewProgress(o.Stderr, fmt.Sprintf("prefix sim %d: identities", n), n)
		_, keys, err := sim.Identities(o.Seed, n, func(d int) { bar.Set(d) })
		bar.Finish()
		if err != nil {
			return err
		}
		tID := time.Since(start)
		rtt, _, err := space(p.PrefixSpace, n, o.Seed)
		if err != nil {
			return err
		}
		scheme, err := superpeer.Exact(p.PrefixS)
		if err != nil {
			return err
		}
		t1 := time.Now()
		pr := sim.Prefix(keys, scheme, capacityFor(n, p.PrefixS))
		tSel := time.Since(t1)
		t2 := time.Now()
		ev, err := metrics.Evaluate(rtt, pr.Assignment, pr.Superpeers, capacityFor(n, p.PrefixS))
		if err != nil {
			return err
		}
		tEval := time.Since(t2)
		row := simScaleRow{Method: "prefix", N: n, Seconds: time.Since(start).Seconds(),
			PhaseSecs: fmt.Sprintf("identities %.1f, lookups %.2f, evaluate %.1f", tID.Seconds(), tSel.Seconds(), tEval.Seconds()),
			RSSMiB:    mib(swarm.RSS()), PeakRSSMiB: mib(peakRSS()), Superpeers: len(pr.Superpeers), ClientRTT: ev.ClientRTT.Mean}
		simRows = append(simRows, row)
		st.Add(row.Method, n, row.Seconds, row.RSSMiB, row.PeakRSSMiB, row.Superpeers, row.ClientRTT, "", row.PhaseSecs)
	}
	for _, n := range p.RepelN {
		freeMemory()
		row, err := scaleRepel(o, p, n)
		if err != nil {
			return err
		}
		simRows = append(simRows, row)
		st.Add(row.Method, n, row.Seconds, row.RSSMiB, row.PeakRSSMiB, row.Superpeers, row.ClientRTT, row.Events, row.PhaseSecs)
	}
	if err := printTable(o, r, "simulator", "simulator time and memory vs n (2 cores)", st); err != nil {
		return err
	}
	// Live swarms.
	lt := report.NewTable("peers", "build s", "converge s", "select s", "selected", "wrong", "RSS MiB", "MiB/peer", "goroutines", "superpeers")
	var liveRows []liveScaleRow
	for _, n := range p.LiveN {
		freeMemory()
		rtt, _, err := space(p.Latency, n, o.Seed)
		if err != nil {
			return err
		}
		pl := rtt.(*latency.Placement)
		before := swarm.RSS()
		s, took, err := liveSwarm(o.Ctx, liveConfig{N: n, S: p.S, Seed: o.Seed, RTT: rtt, HostOf: pl.Host, Capacity: capacityFor(n, p.S), SelectTimeout: p.SelectTimeout}, o.Stderr)
		converged := true
		if errors.Is(err, errSelectTimeout) {
			converged, err = false, nil
		}
		if err != nil {
			return err
		}
		rss := swarm.RSS()
		st := s.PrefixState()
		row := liveScaleRow{N: n, BuildSeconds: s.BuildTime.Seconds(), ConvergeSeconds: s.ConvergeTime.Seconds(), SelectSeconds: took.Seconds(),
			RSSMiB: mib(rss), MiBPerPeer: mib(rss-min(before, rss)) / float64(n), Goroutines: swarm.Goroutines(), Superpeers: len(st.Superpeers),
			SelectConverged: converged, WrongAtEnd: st.Wrong}
		s.Close()
		liveRows = append(liveRows, row)
		lt.Add(n, row.BuildSeconds, row.ConvergeSeconds, row.SelectSeconds, converged, row.WrongAtEnd, row.RSSMiB, row.MiBPerPeer, row.Goroutines, row.Superpeers)
	}
	if err := printTable(o, r, "live", "live swarm (mocknet, prefix method) vs n", lt); err != nil {
		return err
	}
	var lx, lb, lc, ls, lm []float64
	for _, row := range liveRows {
		lx = append(lx, float64(row.N))
		lb = append(lb, row.BuildSeconds)
		lc = append(lc, row.ConvergeSeconds)
		ls = append(ls, row.SelectSeconds)
		lm = append(lm, row.RSSMiB)
	}
	if err := r.Lines("live-time", report.Figure{Title: "live swarm: time vs n", X: "peers", Y: "seconds", LogX: true, Legend: "top-left"},
		[]report.Series{{Name: "build + join", X: lx, Y: lb, Points: true}, {Name: "converge", X: lx, Y: lc, Points: true}, {Name: "select (prefix)", X: lx, Y: ls, Points: true}}); err != nil {
		return err
	}
	if err := r.Lines("live-rss", report.Figure{Title: "live swarm: resident memory vs n", X: "peers", Y: "RSS (MiB)", LogX: true, Legend: "top-left"},
		[]report.Series{{Name: "RSS", X: lx, Y: lm, Points: true}}); err != nil {
		return err
	}
	var series []report.Series
	for _, m := range []string{"prefix", "vivaldi+repel"} {
		var xs, ys []float64
		for _, row := range simRows {
			if row.Method == m {
				xs = append(xs, float64(row.N))
				ys = append(ys, row.Seconds)
			}
		}
		series = append(series, report.Series{Name: m, X: xs, Y: ys, Points: true})
	}
	if err := r.Lines("sim-time", report.Figure{Title: "simulator: wall time vs n (2 cores)", X: "peers", Y: "seconds", LogX: true, LogY: true, Legend: "top-left"}, series); err != nil {
		return err
	}
	return r.WriteResults(p, map[string]any{"simulator": simRows, "live": liveRows})
}

func scaleRepel(o Options, p scaleParams, n int) (simScaleRow, error) {
	start := time.Now()
	rtt, _, err := space(p.RepelSpace, n, o.Seed)
	if err != nil {
		return simScaleRow{}, err
	}
	ids, _, err := sim.Identities(o.Seed, n, nil)
	if err != nil {
		return simScaleRow{}, err
	}
	tID := time.Since(start)
	bar := report.NewProgress(o.Stderr, fmt.Sprintf("vivaldi sim %d", n), p.VivaldiRounds)
	t1 := time.Now()
	vr, err := sim.SimulateVivaldi(sim.VivaldiOptions{RTT: rtt, Seed: o.Seed, Rounds: p.VivaldiRounds, Progress: func(d, _ int) { bar.Set(d) }})
	bar.Finish()
	if err != nil {
		return simScaleRow{}, err
	}
	tViv := time.Since(t1)
	idStrs := sim.IDStrings(ids)
	rbar := report.NewProgress(o.Stderr, fmt.Sprintf("repel sim %d (virtual s)", n), 1800)
	t2 := time.Now()
	rr, err := sim.SimulateRepel(sim.RepelOptions{RTT: rtt, Coords: vr.Coords, Neighbors: vr.Neighbors, IDs: idStrs,
		Config: repelConfig(p.RepelS), Seed: o.Seed, Attach: sim.AttachPredicted,
		Progress: func(now, _ time.Duration) { rbar.Set(int(now.Seconds())) }})
	rbar.Finish()
	if err != nil {
		return simScaleRow{}, err
	}
	tRep := time.Since(t2)
	ev, err := metrics.Evaluate(rtt, rr.Assignment, rr.Superpeers, 0)
	if err != nil {
		return simScaleRow{}, err
	}
	settled := rr.Settled
	last := vr.Checkpoints[len(vr.Checkpoints)-1]
	return simScaleRow{Method: "vivaldi+repel", N: n, Seconds: time.Since(start).Seconds(),
		PhaseSecs: fmt.Sprintf("identities %.1f, vivaldi %.1f, repel %.1f", tID.Seconds(), tViv.Seconds(), tRep.Seconds()),
		RSSMiB:    mib(swarm.RSS()), PeakRSSMiB: mib(peakRSS()), Superpeers: len(rr.Superpeers), ClientRTT: ev.ClientRTT.Mean,
		Events: vr.Events + rr.LoopEvents, Settled: &settled, VirtualSecs: rr.VirtualSeconds, VivMedian: last.Median}, nil
}
