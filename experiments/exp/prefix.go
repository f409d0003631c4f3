package exp

import (
	"fmt"
	"math/rand"
	"strings"
	"time"

	"github.com/superpeer-overlay/superpeer/experiments/latency"
	"github.com/superpeer-overlay/superpeer/experiments/report"
	"github.com/superpeer-overlay/superpeer/experiments/swarm"
)

func init() {
	register(Experiment{
		Name:    "prefix",
		Summary: "live swarm, prefix method over n and S: superpeer count vs both formulas, load, client RTT beside random, convergence and recovery after every superpeer is killed, overhead",
		run:     runPrefix,
	})
}

type prefixParams struct {
	common
	Latency  string        `json:"latency"`
	Ns       []int         `json:"ns"`
	Ss       []int         `json:"ss"`
	TTL      time.Duration `json:"ttl_ns"`
	Parallel int           `json:"parallel"`
	Notes    []string      `json:"notes"`
}

type prefixRow struct {
	N              int                     `json:"n"`
	S              int                     `json:"s"`
	Capacity       int                     `json:"capacity"`
	Before         swarm.SelectionSummary  `json:"before"`
	Killed         int                     `json:"killed"`
	RecoverSeconds float64                 `json:"recover_seconds"`
	After          *swarm.SelectionSummary `json:"after"`
	JoinSeconds    float64                 `json:"join_seconds"`
	// Error says why a cell has no figures (the run goes on to the next).
	Error  string  `json:"error,omitempty"`
	RSSMiB float64 `json:"rss_mib"`
}

// perPeer sums a summary's messages per peer per second over protocols.
func perPeer(m map[string]float64) (msgs, bytes float64) {
	for k, v := range m {
		if strings.HasSuffix(k, "_bytes") {
			bytes += v
			continue
		}
		msgs += v
	}
	return msgs, bytes
}

func runPrefix(o Options, r *report.Run) error {
	p := prefixParams{common: commonOf(o), Latency: latency.Default, TTL: 9 * time.Second, Parallel: 2048}
	if o.Quick {
		p.Ns, p.Ss = []int{200}, []int{50, 8}
	} else {
		// Fewest peers per group first: at n = 5000, S = 8 puts 625 peers
		// on each group key, the slowest cell on one machine.
		p.Ns, p.Ss = []int{200, 1000, 5000}, []int{100, 50, 8}
	}
	p.Notes = []string{
		"one fresh swarm per (n, S): build, join, converge the DHT, then every peer starts the prefix selector at once (first lookups spread over n × 20 ms, at least 1 s)",
		"exactly S groups (superpeer.Exact); capacity C = 2⌈n/S⌉; converged = swarm.WaitPrefix (every role right, every client attached to its group's superpeer or, when full, one that accepted it)",
		"then every superpeer is killed at once; recover = time until WaitPrefix holds again on the survivors",
		"random = S random live peers, each client with its nearest that has room (seeded); RTTs from the matrix",
		"messages per peer per second: all protocols (kad, closest, attach) from selection start to convergence; bytes are the attach protocol's",
	}
	t := report.NewTable("n", "S", "C", "count", "expected", "book", "load max", "load mean", "gini",
		"rtt mean", "rtt p90", "random mean", "converge s", "killed", "recover s", "count after", "msgs/peer/s", "attach B/peer/s")
	var rows []prefixRow
	conv := map[int]*report.Series{}
	rec := map[int]*report.Series{}
	for _, S := range p.Ss {
		conv[S] = &report.Series{Name: fmt.Sprintf("converge, S = %d", S), Points: true}
		rec[S] = &report.Series{Name: fmt.Sprintf("recover, S = %d", S), Points: true}
	}
	for _, n := range p.Ns {
		for _, S := range p.Ss {
			fmt.Fprintf(o.Stderr, "n = %d, S = %d\n", n, S)
			rtt, _, err := space(p.Latency, n, o.Seed)
			if err != nil {
				return err
			}
			pl := rtt.(*latency.Placement)
			c := capacityFor(n, S)
			start := time.Now()
			s, took, err := liveSwarm(o.Ctx, liveConfig{N: n, S: S, Seed: o.Seed, RTT: rtt, HostOf: pl.Host, Capacity: c, TTL: p.TTL, Parallel: p.Parallel}, o.Stderr)
			if err != nil {
				if o.Ctx.Err() != nil {
					return fmt.Errorf("n = %d, S = %d: %w", n, S, err)
				}
				// One swarm that does not converge (it happens at
				// n = 5000 on a loaded machine) costs its cell, not the run.
				fmt.Fprintf(o.Stdout, "n = %d, S = %d: no figures: %v\n", n, S, err)
				rows = append(rows, prefixRow{N: n, S: S, Capacity: c, Error: err.Error()})
				t.Add(n, S, c, "failed")
				continue
			}
			row := prefixRow{N: n, S: S, Capacity: c, JoinSeconds: time.Since(start).Seconds() - took.Seconds()}
			row.Before, err = s.Summary(took, rand.New(rand.NewSource(o.Seed+3)))
			if err != nil {
				s.Close()
				return err
			}
			row.RSSMiB = float64(swarm.RSS()) / (1 << 20)
			victims := s.PickKill(0, true, rand.New(rand.NewSource(o.Seed+4)))
			row.Killed = len(victims)
			killAt := time.Now()
			s.Kill(victims)
			d, err := s.WaitPrefix(o.Ctx, killAt)
			if err != nil {
				s.Close()
				if o.Ctx.Err() != nil {
					return fmt.Errorf("n = %d, S = %d: recovery: %w", n, S, err)
				}
				fmt.Fprintf(o.Stdout, "n = %d, S = %d: no recovery figures: %v\n", n, S, err)
				row.Error = "recovery: " + err.Error()
				rows = append(rows, row)
				continue
			}
			row.RecoverSeconds = d.Seconds()
			after, err := s.Summary(d, rand.New(rand.NewSource(o.Seed+5)))
			s.Close()
			if err != nil {
				return err
			}
			row.After = &after
			rows = append(rows, row)
			b := row.Before
			msgs, bytes := perPeer(b.PerPeerPerSecond)
			t.Add(n, S, c, b.Count, b.Expected, b.Book, b.ClientsPerSuperpeer.Max, b.ClientsPerSuperpeer.Mean, b.ClientsPerSuperpeer.Gini,
				b.ClientRTT.Mean, b.ClientRTT.P90, b.RandomClientRTT.Mean, b.ConvergeSeconds, row.Killed, row.RecoverSeconds, after.Count, msgs, bytes)
			fmt.Fprintf(o.Stdout, "n = %d, S = %d: %d superpeers (expected %.2f), load max %d mean %.1f, client RTT %.1f ms (random %.1f), converged %.1f s, recovered %.1f s after killing %d\n",
				n, S, b.Count, b.Expected, b.ClientsPerSuperpeer.Max, b.ClientsPerSuperpeer.Mean, b.ClientRTT.Mean, b.RandomClientRTT.Mean, b.ConvergeSeconds, row.RecoverSeconds, row.Killed)
			conv[S].X, conv[S].Y = append(conv[S].X, float64(n)), append(conv[S].Y, b.ConvergeSeconds)
			rec[S].X, rec[S].Y = append(rec[S].X, float64(n)), append(rec[S].Y, row.RecoverSeconds)
		}
	}
	if err := printTable(o, r, "prefix", "prefix method on a live swarm (PlanetLab): before and after killing every superpeer", t); err != nil {
		return err
	}
	var series []report.Series
	for _, S := range p.Ss {
		series = append(series, *conv[S], *rec[S])
	}
	if err := r.Lines("times", report.Figure{Title: "prefix method: convergence and recovery (all superpeers killed)", X: "peers", Y: "seconds", LogX: true}, series); err != nil {
		return err
	}
	return r.WriteResults(p, map[string]any{"rows": rows})
}
