package exp

import (
	"fmt"
	"strings"
	"time"

	"github.com/superpeer-overlay/superpeer/experiments/flood"
	"github.com/superpeer-overlay/superpeer/experiments/report"
)

// floodParams are the flood part of the attacks experiment.
type floodParams struct {
	Kinds          []flood.Kind `json:"kinds"`
	SecondsPerKind float64      `json:"seconds_per_kind"`
	Clients        int          `json:"clients"`
	Workers        int          `json:"attacker_streams_in_flight"`
	TTLms          int64        `json:"ttl_ms"`
	Notes          []string     `json:"notes"`
}

// runFloods floods a peer with each kind, without the defences and with
// them (experiments/flood), and writes the floods table.
func runFloods(o Options, r *report.Run) (floodParams, []flood.Result, error) {
	cfg := flood.Config{Duration: 5 * time.Second, Seed: o.Seed}
	if o.Quick {
		cfg.Duration = 2 * time.Second
	}
	p := floodParams{Kinds: flood.Kinds, Clients: 3, Workers: 64, TTLms: 1500,
		Notes: []string{
			"one process on TCP loopback: a victim built as peer run builds its host (internal/peerhost's resource manager), running repel (prefix with a fraction for census digests, the only method speaking the census protocol), 3 honest clients renewing every TTL/3 and one attacker host with 64 streams in flight and no resource manager of its own",
			"defences false: go-libp2p's default limits (what libp2p.New makes), no per-peer rate limits and no token guard; true: repel.AddLimits over them, every constructor's default rate limits and repel.Config.Guard (a token changes hands only by its live holder's signed hand-over)",
			"token: kept if the repel victim was never fenced during the flood (and how many fresher versions it refused as not its own hand-over, untraced); taken N× if it was fenced N times, and whether it held the token again at the end (it mints it again once the forger's version has been silent for DeadAfter, 1 s here)",
			"dropped: the victim's refused frames by reason over its components (dht, attach, vivaldi, repel; repel's streams lost before a frame counted as lost); rcmgr_refused: streams its resource manager refused, by scope and protocol",
			"peak_rss_bytes and peak_heap_bytes are the whole process's (victim, clients and attacker), sampled every 50 ms, after returning the earlier kinds' memory to the OS",
		}}
	if o.tiny {
		// Renewals every 200 ms: two or so in each kind's 450 ms.
		cfg.Duration, cfg.Settle, p.TTLms = 450*time.Millisecond, 150*time.Millisecond, 600
	}
	p.SecondsPerKind = cfg.Duration.Seconds()
	cfg.Clients, cfg.Workers, cfg.TTL = p.Clients, p.Workers, time.Duration(p.TTLms)*time.Millisecond
	var rows []flood.Result
	for _, def := range []bool{false, true} {
		c := cfg
		c.Defences = def
		c.Progress = func(k flood.Kind) {
			fmt.Fprintf(o.Stderr, "flood: %s, defences %v (%v)\n", k, def, c.Duration)
		}
		rs, err := flood.Run(o.Ctx, c)
		if err != nil {
			return p, rows, err
		}
		rows = append(rows, rs...)
	}
	t := report.NewTable("kind", "defences", "frames sent", "frames/s", "dropped (by reason)", "rcmgr refused", "answered", "reflected", "renewals ok/all", "renewal max ms", "token", "peak heap MiB", "peak RSS MiB")
	for _, x := range rows {
		t.Add(string(x.Kind), x.Defences, x.FramesSent, x.FramesPerSecond, counts(x.Dropped), x.RcmgrRefused["protocol-peer"]+x.RcmgrRefused["stream"]+x.RcmgrRefused["protocol"]+x.RcmgrRefused["memory"],
			x.Answered, x.Reflected, fmt.Sprintf("%d/%d", x.Renewals-x.RenewalsFailed, x.Renewals), x.RenewalMaxMs, tokenCell(x), float64(x.PeakHeap)/(1<<20), float64(x.PeakRSS)/(1<<20))
	}
	err := printTable(o, r, "floods", fmt.Sprintf("floods on one peer over TCP loopback (%v a kind, 64 streams in flight, 3 honest clients renewing every %v)", cfg.Duration, cfg.TTL/3), t)
	return p, rows, err
}

// tokenCell is what became of the repel victim's token in a flood.
func tokenCell(x flood.Result) string {
	if x.Victim != "repel" {
		return "-"
	}
	switch {
	case x.Fenced > 0:
		again := "minted again"
		if !x.StillHolding {
			again = "not held"
		}
		return fmt.Sprintf("taken %d× (%s at the end)", x.Fenced, again)
	case !x.StillHolding:
		return "not held"
	}
	return fmt.Sprintf("kept (untraced %d)", x.Untraced)
}

// counts is m as "k n, k n" in key order.
func counts(m map[string]uint64) string {
	var parts []string
	for _, k := range flood.Sorted(m) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}
