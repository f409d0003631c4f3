package exp

import (
	"fmt"
	"math"

	"gonum.org/v1/plot/vg"

	"github.com/superpeer-overlay/superpeer/experiments/metrics"
	"github.com/superpeer-overlay/superpeer/experiments/report"
	"github.com/superpeer-overlay/superpeer/experiments/sim"
	"github.com/superpeer-overlay/superpeer/superpeer"
)

func init() {
	register(Experiment{
		Name:    "superpeer-count",
		Summary: "prefix method: measured superpeer count vs 2^k·(1−(1−2^−k)^n) vs Tanenbaum's 2^(k−m)·N over n and S",
		run:     runCount,
	})
}

type countParams struct {
	common
	N          []int  `json:"n"`
	S          []int  `json:"s"`
	M          int    `json:"m_bits"`
	Identities string `json:"identities"`
}

type countRow struct {
	Scheme   string  `json:"scheme"`
	S        int     `json:"s"`
	Bits     int     `json:"bits"`
	Groups   int     `json:"groups"`
	N        int     `json:"n"`
	Measured int     `json:"measured"`
	Expected float64 `json:"expected"`
	Book     float64 `json:"book"`
}

func runCount(o Options, r *report.Run) error {
	p := countParams{common: commonOf(o), M: 256,
		Identities: "peer i of the swarm seeded with seed (sim.Identity): the first n of one sequence"}
	if o.Quick {
		p.N = []int{10, 30, 100, 300, 1000, 3000, 10_000, 30_000, 100_000}
		p.S = []int{8, 16, 100, 1000}
	} else {
		p.N = []int{10, 30, 100, 300, 1000, 3000, 10_000, 30_000, 100_000, 300_000, 1_000_000}
		p.S = []int{8, 16, 100, 1000, 10_000}
	}
	if o.tiny {
		p.N, p.S = []int{10, 100, 1000}, []int{8, 100}
	}
	maxN := p.N[len(p.N)-1]
	bar := report.NewProgress(o.Stderr, "identities", maxN)
	_, keys, err := sim.Identities(o.Seed, maxN, func(d int) { bar.Set(d) })
	bar.Finish()
	if err != nil {
		return err
	}
	var rows []countRow
	t := report.NewTable("scheme", "S", "k", "groups", "n", "measured", "expected", "book 2^(k-m)N", "measured/expected")
	for _, S := range p.S {
		k := int(math.Ceil(math.Log2(float64(S))))
		pow2, err := superpeer.Pow2(k)
		if err != nil {
			return err
		}
		exact, err := superpeer.Exact(S)
		if err != nil {
			return err
		}
		for _, sc := range []struct {
			name   string
			scheme superpeer.Prefix
		}{{"pow2", pow2}, {"exact", exact}} {
			for _, n := range p.N {
				got := sim.OccupiedGroups(keys[:n], sc.scheme)
				row := countRow{
					Scheme: sc.name, S: S, Bits: sc.scheme.Bits(), Groups: sc.scheme.Groups(), N: n,
					Measured: got, Expected: sc.scheme.ExpectedCount(n),
					Book: metrics.BookPrefixCount(float64(n), sc.scheme.Bits(), p.M),
				}
				if sc.name == "pow2" {
					// Lo et al.'s formula, from metrics, must be the scheme's own.
					row.Expected = metrics.ExpectedPrefixCount(n, k)
				}
				rows = append(rows, row)
				t.Add(row.Scheme, S, row.Bits, row.Groups, n, got, row.Expected, row.Book, float64(got)/row.Expected)
			}
		}
	}
	if err := printTable(o, r, "counts", "superpeer count (measured on seeded identities)", t); err != nil {
		return err
	}
	// One plot per scheme: measured points and the formula per S.
	for _, scheme := range []string{"pow2", "exact"} {
		var series, withBook []report.Series
		for _, S := range p.S {
			var xs, meas, exp, book []float64
			for _, row := range rows {
				if row.Scheme == scheme && row.S == S {
					xs = append(xs, float64(row.N))
					meas = append(meas, float64(row.Measured))
					exp = append(exp, row.Expected)
					book = append(book, row.Book)
				}
			}
			series = append(series,
				report.Series{Name: fmt.Sprintf("S=%d measured", S), X: xs, Y: meas, Points: true},
				report.Series{Name: fmt.Sprintf("S=%d expected", S), X: xs, Y: exp})
			// Eighty decades apart: plot log10 on a linear axis (gonum's
			// log ticks over that range are unreadable).
			withBook = append(withBook,
				report.Series{Name: fmt.Sprintf("S=%d measured", S), X: xs, Y: log10s(meas), Points: true},
				report.Series{Name: fmt.Sprintf("S=%d book", S), X: xs, Y: log10s(book)})
		}
		title := "Lo et al.'s scheme: 2^⌈log2 S⌉ groups"
		if scheme == "exact" {
			title = "exactly S groups (prefix code)"
		}
		if err := r.Lines("count-"+scheme, report.Figure{Title: "superpeers vs n, " + title, X: "peers n", Y: "superpeers", LogX: true, LogY: true, Legend: "top-left", Height: 6 * vg.Inch}, series); err != nil {
			return err
		}
		if err := r.Lines("count-book-"+scheme, report.Figure{Title: "measured vs Tanenbaum & van Steen's 2^(k−m)·N, " + scheme, X: "peers n", Y: "log10(superpeers)", LogX: true, Legend: "bottom-right", Height: 6 * vg.Inch}, withBook); err != nil {
			return err
		}
	}
	return r.WriteResults(p, map[string]any{"rows": rows})
}

func log10s(xs []float64) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = math.Log10(x)
	}
	return out
}
