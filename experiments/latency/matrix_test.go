package latency

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func TestParse_RefusesMalformedFilesNamingTheLine(t *testing.T) {
	cases := []struct {
		name, text string
		line       int
		want       string
	}{
		{"ragged", "# c\n0\t1\t2\n1\t0\n2\t1\t0\n", 3, "ragged"},
		{"not a number", "0\t1\n1x\t0\n", 2, "not a number"},
		{"nan", "0\tNaN\n1\t0\n", 1, "not a number"},
		{"inf", "0\t+Inf\n1\t0\n", 1, "not a number"},
		{"negative", "0\t-2\n1\t0\n", 1, "negative"},
		{"negative fraction", "0\t1\n-0.5\t0\n", 2, "negative"},
		{"diagonal", "0\t1\n1\t3\n", 2, "diagonal"},
		{"missing diagonal", "-1\t1\n1\t0\n", 1, "diagonal"},
		{"too few rows", "0\t1\t1\n1\t0\t1\n", 2, "square"},
		{"too many rows", "0\t1\n1\t0\n1\t1\n", 3, "square"},
		{"empty", "# only a comment\n\n", 0, "no rows"},
		{"huge", "0\t1e300\n1\t0\n", 1, "out of range"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse(strings.NewReader(c.text), "m.tsv")
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error %v, want a *ParseError", err)
			}
			if pe.Line != c.line || !strings.Contains(pe.Msg, c.want) {
				t.Errorf("got line %d %q, want line %d containing %q", pe.Line, pe.Msg, c.line, c.want)
			}
			if c.line > 0 && !strings.Contains(err.Error(), "m.tsv: line ") {
				t.Errorf("message %q does not name the file and line", err)
			}
		})
	}
}

func TestParse_MissingPairs(t *testing.T) {
	// Host 0 and 2 never measured each other; 2→1 measured only one way.
	m, err := Parse(strings.NewReader("# x\n0\t10\t-1\n10\t0\t-1\n-1\t30\t0\n"), "t")
	if err != nil {
		t.Fatal(err)
	}
	if m.Len() != 3 || m.RTT(0, 2) != Missing || m.RTT(0, 1) != 10 {
		t.Fatalf("parsed wrong: len %d rtt(0,2) %v rtt(0,1) %v", m.Len(), m.RTT(0, 2), m.RTT(0, 1))
	}
	if got := m.MissingPairs(); got != 3 {
		t.Errorf("MissingPairs = %d, want 3", got)
	}
	f := m.Filled()
	if f.MissingPairs() != 0 {
		t.Fatalf("Filled left %d missing pairs", f.MissingPairs())
	}
	if f.RTT(1, 2) != 30 || f.RTT(2, 1) != 30 {
		t.Errorf("a pair measured one way takes that value: got %v, %v", f.RTT(1, 2), f.RTT(2, 1))
	}
	// 0–2 unmeasured both ways: best two-hop path 0→1→2 = 10 + 30.
	if f.RTT(0, 2) != 40 || f.RTT(2, 0) != 40 {
		t.Errorf("unmeasured pair filled with %v, %v, want 40 via host 1", f.RTT(0, 2), f.RTT(2, 0))
	}
}

func TestBuiltin_MatchesSharedData(t *testing.T) {
	for _, name := range BuiltinNames() {
		m, err := Builtin(name)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]int{"planetlab-490": 490, "seattle-99": 99}[name]
		if m.Len() != want {
			t.Errorf("%s: %d hosts, want %d", name, m.Len(), want)
		}
		// The shipped copy must equal the project's shared data file where
		// that is present (it is beside the checkout in CI).
		path := filepath.Join("..", "..", "..", "shared", "data", "latency", name+".tsv")
		if _, err := os.Stat(path); err != nil {
			continue
		}
		ref, err := Load(path)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < m.Len(); i++ {
			for j := 0; j < m.Len(); j++ {
				if m.RTT(i, j) != ref.RTT(i, j) {
					t.Fatalf("%s (%d,%d): shipped %v, shared %v", name, i, j, m.RTT(i, j), ref.RTT(i, j))
				}
			}
		}
	}
	if _, err := Open("no-such-matrix"); err == nil {
		t.Error("Open of a missing file succeeded")
	}
}

func TestSynthetic_SeededAndMetricPlusAccess(t *testing.T) {
	for _, cfg := range []SyntheticConfig{{}, {Clusters: 4}, {HeavyTail: true}} {
		a, b := NewSynthetic(200, 9, cfg), NewSynthetic(200, 9, cfg)
		c := NewSynthetic(200, 10, cfg)
		same, differ := true, false
		for i := 0; i < 200; i++ {
			for j := 0; j < 200; j++ {
				x := a.RTT(i, j)
				if x != b.RTT(i, j) {
					same = false
				}
				if x != c.RTT(i, j) {
					differ = true
				}
				if x != a.RTT(j, i) || math.IsNaN(x) || (i != j && x < 0.1) || (i == j && x != 0) {
					t.Fatalf("%+v: RTT(%d,%d) = %v is not a symmetric positive RTT", cfg, i, j, x)
				}
			}
		}
		if !same || !differ {
			t.Errorf("%+v: same seed same space %v, other seed other space %v", cfg, same, differ)
		}
	}
}

func TestPlace_SpreadsPeersOverHosts(t *testing.T) {
	m := NewMatrix("four", 4, func(i, j int) float64 { return float64(10 * (i + j)) })
	p, err := Place(m, 10, 1)
	if err != nil {
		t.Fatal(err)
	}
	count := map[int]int{}
	for i := 0; i < p.Len(); i++ {
		count[p.Host(i)]++
	}
	for h := 0; h < 4; h++ {
		if count[h] < 2 || count[h] > 3 {
			t.Errorf("host %d has %d peers, want 2 or 3", h, count[h])
		}
	}
	for i := 0; i < p.Len(); i++ {
		for j := 0; j < p.Len(); j++ {
			want := m.RTT(p.Host(i), p.Host(j))
			if i == j {
				want = 0
			} else if p.Host(i) == p.Host(j) {
				want = DefaultIntraSiteRTT
			}
			if p.RTT(i, j) != want {
				t.Fatalf("RTT(%d,%d) = %v, want %v", i, j, p.RTT(i, j), want)
			}
		}
	}
	small, _ := Place(m, 3, 1)
	seen := map[int]bool{}
	for i := 0; i < 3; i++ {
		if seen[small.Host(i)] {
			t.Errorf("with fewer peers than hosts two peers share host %d", small.Host(i))
		}
		seen[small.Host(i)] = true
	}
	if _, err := Place(NewMatrix("empty", 0, nil), 3, 1); err == nil {
		t.Error("placing on an empty space succeeded")
	}
}

func FuzzParse(f *testing.F) {
	f.Add("0\t1\n1\t0\n")
	f.Add("# c\n0\t-1\t2\n-1\t0\t3\n2\t3\t0\n")
	f.Add("0 1\n1 0 \n")
	f.Add("0\t1\n1\t0\t5\n")
	f.Add("0\tNaN\n1\t0\n")
	f.Fuzz(func(t *testing.T, text string) {
		m, err := Parse(strings.NewReader(text), "fuzz")
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error of type %T, want *ParseError", err)
			}
			return
		}
		for i := 0; i < m.Len(); i++ {
			for j := 0; j < m.Len(); j++ {
				v := m.RTT(i, j)
				if math.IsNaN(v) || math.IsInf(v, 0) || (v < 0 && v != Missing) || (i == j && v != 0) {
					t.Fatalf("accepted a bad entry (%d,%d) = %v", i, j, v)
				}
			}
		}
		f := m.Filled()
		if f.MissingPairs() != 0 {
			t.Fatalf("Filled left missing pairs")
		}
	})
}

// A file that claims a large matrix in its first row and ends there is
// refused having cost memory in proportion to what it holds, not to the
// n×n matrix its first row announces (20 000 columns: 1.6 GB).
func TestParse_MemoryFollowsTheInput(t *testing.T) {
	row := strings.TrimSpace(strings.Repeat("0 ", MaxHosts))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := Parse(strings.NewReader(row+"\n"), "one-row")
	runtime.ReadMemStats(&after)
	var pe *ParseError
	if !errors.As(err, &pe) || !strings.Contains(pe.Error(), "square") {
		t.Fatalf("one row of %d columns: %v, want a ParseError about a square matrix", MaxHosts, err)
	}
	if got, limit := after.TotalAlloc-before.TotalAlloc, uint64(64<<20); got > limit {
		t.Fatalf("parsing a %d-byte file allocated %d MB (limit %d MB)", len(row), got>>20, limit>>20)
	}
}
