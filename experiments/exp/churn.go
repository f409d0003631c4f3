package exp

import (
	"fmt"
	"math"
	"math/rand"
	"slices"
	"sync"
	"time"

	"github.com/superpeer-overlay/superpeer/experiments/latency"
	"github.com/superpeer-overlay/superpeer/experiments/report"
	"github.com/superpeer-overlay/superpeer/superpeer"
)

func init() {
	register(Experiment{
		Name:    "churn",
		Summary: "live swarm, prefix method: kill 10%..100% of the superpeers; recovery time and whether the survivors elect the right ones",
		run:     runChurn,
	})
}

type churnParams struct {
	common
	Latency   string        `json:"latency"`
	N         int           `json:"n"`
	S         int           `json:"s"`
	Capacity  int           `json:"capacity"`
	TTL       time.Duration `json:"ttl_ns"`
	Fractions []float64     `json:"fractions"`
	Sample    time.Duration `json:"sample_interval_ns"`
	Notes     []string      `json:"notes"`
}

type churnRow struct {
	Fraction       float64 `json:"fraction"`
	Live           int     `json:"live_before"`
	Superpeers     int     `json:"superpeers_before"`
	Killed         int     `json:"killed"`
	RecoverSeconds float64 `json:"recover_seconds"`
	Correct        bool    `json:"correct"`
	SuperpeersNow  int     `json:"superpeers_after"`
	Expected       int     `json:"expected_after"`
	Wrong          int     `json:"wrong_after"`
	Unserved       int     `json:"unserved_after"`
	// Series is the number of wrong peers over time since the kill.
	Series []churnPoint `json:"series"`
}

type churnPoint struct {
	T        float64 `json:"t"`
	Wrong    int     `json:"wrong"`
	Unserved int     `json:"unserved"`
}

func runChurn(o Options, r *report.Run) error {
	p := churnParams{common: commonOf(o), Latency: latency.Default, TTL: 6 * time.Second, Sample: 250 * time.Millisecond}
	if o.Quick {
		p.N, p.S = 100, 8
		p.Fractions = []float64{0.25, 1}
	} else {
		p.N, p.S = 300, 16
		p.Fractions = []float64{0.1, 0.25, 0.5, 0.75, 1}
	}
	p.Capacity = capacityFor(p.N, p.S)
	p.Notes = []string{
		"one swarm; the kills follow each other, each after the previous recovery, so n shrinks by the superpeers killed",
		"a kill stops ⌈f·superpeers⌉ current superpeers chosen at random at once (selector, DHT node, host, links)",
		"recovered = swarm.WaitPrefix: every live peer's role is the one all live keys call for and every client is attached; correct = the superpeer set equals the simulator's (sim.Prefix) on the survivors' keys",
	}
	rtt, _, err := space(p.Latency, p.N, o.Seed)
	if err != nil {
		return err
	}
	pl := rtt.(*latency.Placement)
	s, took, err := liveSwarm(o.Ctx, liveConfig{N: p.N, S: p.S, Seed: o.Seed, RTT: rtt, HostOf: pl.Host, Capacity: p.Capacity, TTL: p.TTL}, o.Stderr)
	if err != nil {
		return err
	}
	defer s.Close()
	fmt.Fprintf(o.Stdout, "swarm of %d selected %d superpeers in %.1f s\n", p.N, len(s.PrefixState().Superpeers), took.Seconds())
	scheme, err := superpeer.Exact(p.S)
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewSource(o.Seed + 21))
	t := report.NewTable("fraction", "live", "superpeers", "killed", "recover s", "correct", "superpeers after", "expected", "wrong", "unserved")
	var rows []churnRow
	var series []report.Series
	for _, f := range p.Fractions {
		st := s.PrefixState()
		k := int(math.Ceil(f * float64(len(st.Superpeers))))
		pick := slices.Clone(st.Superpeers)
		rng.Shuffle(len(pick), func(i, j int) { pick[i], pick[j] = pick[j], pick[i] })
		pick = pick[:k]
		row := churnRow{Fraction: f, Live: len(s.Live()), Superpeers: len(st.Superpeers), Killed: k}
		killAt := time.Now()
		s.Kill(pick)
		var mu sync.Mutex
		bar := report.NewProgress(o.Stderr, fmt.Sprintf("recovering from %.0f%% (samples)", 100*f), 0)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			tk := time.NewTicker(p.Sample)
			defer tk.Stop()
			for {
				ps := s.PrefixState()
				mu.Lock()
				row.Series = append(row.Series, churnPoint{T: time.Since(killAt).Seconds(), Wrong: ps.Wrong, Unserved: ps.Unserved})
				bar.Set(len(row.Series))
				mu.Unlock()
				select {
				case <-stop:
					return
				case <-tk.C:
				}
			}
		}()
		d, err := s.WaitPrefix(o.Ctx, killAt)
		bar.Finish()
		close(stop)
		wg.Wait()
		if err != nil {
			return err
		}
		row.RecoverSeconds = d.Seconds()
		after := s.PrefixState()
		exp := simSuperpeers(s, scheme)
		row.Correct = slices.Equal(exp, after.Superpeers)
		row.SuperpeersNow, row.Expected, row.Wrong, row.Unserved = len(after.Superpeers), len(exp), after.Wrong, after.Unserved
		rows = append(rows, row)
		t.Add(f, row.Live, row.Superpeers, k, row.RecoverSeconds, row.Correct, row.SuperpeersNow, row.Expected, row.Wrong, row.Unserved)
		var xs, ys []float64
		for _, pt := range row.Series {
			xs = append(xs, pt.T)
			ys = append(ys, float64(pt.Wrong))
		}
		series = append(series, report.Series{Name: fmt.Sprintf("%.0f%% of superpeers killed", 100*f), X: xs, Y: ys})
	}
	if err := printTable(o, r, "recovery", "recovery after killing superpeers (live swarm, prefix method)", t); err != nil {
		return err
	}
	if err := r.Lines("recovery", report.Figure{Title: fmt.Sprintf("recovery after killing superpeers (%d peers, S = %d)", p.N, p.S), X: "seconds since the kill", Y: "peers in a wrong state"}, series); err != nil {
		return err
	}
	return r.WriteResults(p, map[string]any{"initial_converge_seconds": took.Seconds(), "rows": rows})
}
