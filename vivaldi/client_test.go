package vivaldi

import (
	"errors"
	"fmt"
	"math"
	"math/rand"
	"sort"
	"strings"
	"testing"
	"time"
)

func newTestClient(t *testing.T, cfg Config, seed int64) *Client {
	t.Helper()
	c, err := NewClient(cfg, rand.New(rand.NewSource(seed)))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestClient_NaN_Defense(t *testing.T) {
	cfg := DefaultConfig()
	c := newTestClient(t, cfg, 1)
	good := newCoord(cfg.Dimensions, 0.001, 0.5)
	good.Vec[0] = 0.01
	if err := c.Update("a", good, 20*time.Millisecond); err != nil {
		t.Fatalf("good sample refused: %v", err)
	}
	before := c.GetCoordinate()

	nan := good.Clone()
	nan.Vec[1] = math.NaN()
	inf := good.Clone()
	inf.Vec[2] = math.Inf(-1)
	nanH := good.Clone()
	nanH.Height = math.NaN()
	infE := good.Clone()
	infE.Error = math.Inf(1)
	huge := good.Clone()
	huge.Vec[0] = 1e300
	negH := good.Clone()
	negH.Height = -1
	short := newCoord(cfg.Dimensions-1, 0.001, 0.5)
	long := newCoord(maxDimensions+1, 0.001, 0.5)

	cases := []struct {
		name  string
		coord Coord
		rtt   time.Duration
		want  error
	}{
		{"NaN component", nan, 10 * time.Millisecond, ErrNonFinite},
		{"-Inf component", inf, 10 * time.Millisecond, ErrNonFinite},
		{"NaN height", nanH, 10 * time.Millisecond, ErrNonFinite},
		{"Inf error", infE, 10 * time.Millisecond, ErrNonFinite},
		{"huge component", huge, 10 * time.Millisecond, ErrOutOfRange},
		{"negative height", negH, 10 * time.Millisecond, ErrOutOfRange},
		{"fewer dims", short, 10 * time.Millisecond, ErrDimensions},
		{"too many dims", long, 10 * time.Millisecond, ErrDimensions},
		{"zero RTT", good, 0, ErrRTTRange},
		{"negative RTT", good, -time.Millisecond, ErrRTTRange},
		{"RTT over 10s", good, MaxRTT + time.Nanosecond, ErrRTTRange},
	}
	for _, tc := range cases {
		err := c.Update("b", tc.coord, tc.rtt)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.want)
		}
	}
	after := c.GetCoordinate()
	if fmt.Sprint(before) != fmt.Sprint(after) {
		t.Fatalf("refused samples moved the coordinate: %v -> %v", before, after)
	}
	if after.Check() != nil {
		t.Fatalf("stored coordinate invalid: %v", after)
	}
	st := c.Stats()
	want := Stats{Updates: 1, RefusedNonFinite: 4, RefusedRange: 2, RefusedDims: 2, RefusedRTT: 3}
	if st != want {
		t.Fatalf("stats = %+v, want %+v", st, want)
	}
	// The edge of the range is accepted.
	if err := c.Update("b", good, MaxRTT); err != nil {
		t.Fatalf("RTT of exactly %v refused: %v", MaxRTT, err)
	}
	// The latency filter of a peer is untouched by refused samples: "b"
	// got exactly one sample.
	if n := len(c.filter["b"].samples); n != 1 {
		t.Fatalf("filter of b holds %d samples, want 1", n)
	}
}

func TestClient_Reset(t *testing.T) {
	cfg := DefaultConfig()
	cfg.GravityRho = 0 // gravity would pull it back in range
	c := newTestClient(t, cfg, 1)
	me := newCoord(cfg.Dimensions, cfg.HeightMin, cfg.ErrorMax)
	me.Vec[0] = maxComponent
	if err := c.SetCoordinate(me); err != nil {
		t.Fatal(err)
	}
	other := newCoord(cfg.Dimensions, cfg.HeightMin, cfg.ErrorMax)
	other.Vec[0] = maxComponent - 1
	// The sample pushes us 9 s further out, past MaxComponent: the state
	// goes invalid and must be reset, not stored.
	if err := c.Update("x", other, MaxRTT); err != nil {
		t.Fatal(err)
	}
	got := c.GetCoordinate()
	if c.Stats().Resets != 1 {
		t.Fatalf("Resets = %d, want 1", c.Stats().Resets)
	}
	if got.Check() != nil || got.Vec[0] != 0 || got.Error != cfg.ErrorMax {
		t.Fatalf("after reset coordinate = %v, want the origin with max error", got)
	}
}

func TestClient_SetCoordinate_Refuses(t *testing.T) {
	c := newTestClient(t, DefaultConfig(), 1)
	bad := newCoord(DefaultConfig().Dimensions, 0, 0)
	bad.Vec[0] = math.NaN()
	if err := c.SetCoordinate(bad); !errors.Is(err, ErrNonFinite) {
		t.Fatalf("err = %v, want ErrNonFinite", err)
	}
	if err := c.SetCoordinate(newCoord(2, 0, 0)); !errors.Is(err, ErrDimensions) {
		t.Fatalf("err = %v, want ErrDimensions", err)
	}
}

func TestClient_GetCoordinateIsACopy(t *testing.T) {
	c := newTestClient(t, DefaultConfig(), 1)
	co := c.GetCoordinate()
	co.Vec[0] = math.NaN()
	if c.GetCoordinate().Check() != nil {
		t.Fatal("changing a returned coordinate changed the client")
	}
}

func TestClient_LatencyFilter(t *testing.T) {
	cfg := DefaultConfig()
	cfg.LatencyFilterSize = 3
	c := newTestClient(t, cfg, 1)
	var got []float64
	for _, s := range []float64{0.010, 0.012, 5.0, 0.011, 0.013} {
		r, _ := c.latencyFilter("p", s)
		got = append(got, r)
	}
	// Medians of the last three: the 5 s outlier never comes through.
	want := []float64{0.010, 0.012, 0.012, 0.012, 0.013}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("filtered = %v, want %v", got, want)
	}
	c.forgetNode("p")
	if _, ok := c.filter["p"]; ok {
		t.Fatal("forgetNode kept the filter")
	}
}

func TestClient_FilterBounded(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxFilterPeers = 8
	c := newTestClient(t, cfg, 1)
	o := newCoord(cfg.Dimensions, cfg.HeightMin, 1)
	for i := 0; i < 100; i++ {
		if err := c.Update(fmt.Sprint("peer", i), o, 10*time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(c.filter); n != 8 {
		t.Fatalf("filter remembers %d peers, want 8", n)
	}
	if _, ok := c.filter["peer99"]; !ok {
		t.Fatal("the newest peer was evicted")
	}
}

func TestConfig_Validate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	for field, mutate := range map[string]func(*Config){
		"Dimensions":         func(c *Config) { c.Dimensions = 0 },
		"ErrorMax":           func(c *Config) { c.ErrorMax = math.NaN() },
		"CE":                 func(c *Config) { c.CE = 2 },
		"CC":                 func(c *Config) { c.CC = -1 },
		"CCStart":            func(c *Config) { c.CCStart = 3 },
		"HeightMin":          func(c *Config) { c.HeightMin = -1 },
		"LatencyFilterSize":  func(c *Config) { c.LatencyFilterSize = 0 },
		"MaxFilterPeers":     func(c *Config) { c.MaxFilterPeers = 0 },
		"GravityRho":         func(c *Config) { c.GravityRho = math.Inf(1) },
		"RelativeForce":      func(c *Config) { c.RelativeForce = 5 },
		"NeighborWindow":     func(c *Config) { c.NeighborWindow = -1 },
		"SettledError":       func(c *Config) { c.SettledError = -1 },
		"CCStartSamples":     func(c *Config) { c.CCStartSamples = -1 },
		"StartHeight":        func(c *Config) { c.StartHeight = 2 },
		"StartHeightSamples": func(c *Config) { c.StartHeightSamples = -1 },
		"EarlyConfidence":    func(c *Config) { c.EarlyConfidence = math.NaN() },
	} {
		c := DefaultConfig()
		mutate(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: err = %v, want one naming the field", field, err)
		}
		if _, err := NewClient(c, nil); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: NewClient err = %v, want ErrConfig", field, err)
		}
	}
}

func TestClient_StartHeight(t *testing.T) {
	cfg := DefaultConfig()
	c := newTestClient(t, cfg, 1)
	o := newCoord(cfg.Dimensions, cfg.HeightMin, cfg.ErrorMax)
	// The height follows StartHeight × the least RTT so far, for the first
	// StartHeightSamples samples of an unsettled node.
	for i, ms := range []float64{40, 20, 30} {
		if err := c.Update(fmt.Sprint("p", i), o, time.Duration(ms*float64(time.Millisecond))); err != nil {
			t.Fatal(err)
		}
		if h, want := c.GetCoordinate().Height, cfg.StartHeight*min(40, ms)/1000; i < 2 && math.Abs(h-want) > 1e-12 {
			t.Fatalf("after %v ms: height %v, want %v", ms, h, want)
		}
	}
	if h, want := c.GetCoordinate().Height, cfg.StartHeight*0.020; math.Abs(h-want) > 1e-12 {
		t.Fatalf("height %v, want %v (the least RTT so far)", h, want)
	}

	// A settled coordinate restored across a restart keeps its height.
	r := newTestClient(t, cfg, 2)
	saved := newCoord(cfg.Dimensions, 0.003, 0.1)
	saved.Vec[0] = 0.05
	if err := r.SetCoordinate(saved); err != nil {
		t.Fatal(err)
	}
	far := newCoord(cfg.Dimensions, cfg.HeightMin, 0.1)
	far.Vec[0] = 0.1
	if err := r.Update("q", far, 5*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if h := r.GetCoordinate().Height; math.Abs(h-cfg.StartHeight*0.005) < 1e-9 {
		t.Fatalf("restored settled coordinate had its height reset to %v", h)
	}

	// 0 turns it off: the height stays at HeightMin after a sample from a
	// coincident peer (the whole move goes into the vector).
	cfg.StartHeight = 0
	z := newTestClient(t, cfg, 1)
	if err := z.Update("p", o, 40*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if h := z.GetCoordinate().Height; h != cfg.HeightMin {
		t.Fatalf("StartHeight 0: height %v, want HeightMin", h)
	}
}

func TestClient_EarlyConfidence(t *testing.T) {
	// An unsettled node sampling a confident peer moves less with a damped
	// weight than with [1]'s, but still towards the right distance.
	move := func(p float64) float64 {
		cfg := DefaultConfig()
		cfg.EarlyConfidence = p
		cfg.StartHeight = 0
		c := newTestClient(t, cfg, 1)
		start := newCoord(cfg.Dimensions, cfg.HeightMin, cfg.ErrorMax)
		start.Vec[0] = 0.010
		if err := c.SetCoordinate(start); err != nil {
			t.Fatal(err)
		}
		peer := newCoord(cfg.Dimensions, cfg.HeightMin, 0.1)
		if err := c.Update("p", peer, 50*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		return c.GetCoordinate().DistanceTo(peer) - start.DistanceTo(peer)
	}
	full, damped := move(1), move(0.25)
	if !(damped > 0 && damped < full) {
		t.Fatalf("moved %v with EarlyConfidence 0.25, %v with 1: want 0 < damped < full", damped, full)
	}
}

// simulate runs cycles rounds in which every node samples one random other
// node, as serf's Simulate does, and returns the mean and max relative error
// over all pairs.
func simulate(t *testing.T, cfg Config, truth [][]float64, cycles int) (avg, max float64, clients []*Client) {
	t.Helper()
	n := len(truth)
	clients = make([]*Client, n)
	for i := range clients {
		clients[i] = newTestClient(t, cfg, int64(i+1))
	}
	rng := rand.New(rand.NewSource(1))
	for range cycles {
		for i := range clients {
			j := rng.Intn(n)
			if j == i {
				continue
			}
			rtt := time.Duration(truth[i][j] * float64(time.Second))
			// A refusal by the defences (ErrImplausible) is part of the
			// model; anything else is a bug here.
			if err := clients[i].Update(fmt.Sprint(j), clients[j].GetCoordinate(), rtt); err != nil && !errors.Is(err, ErrImplausible) {
				t.Fatal(err)
			}
		}
	}
	count := 0
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			est := clients[i].GetCoordinate().DistanceTo(clients[j].GetCoordinate())
			e := math.Abs(est-truth[i][j]) / truth[i][j]
			avg += e
			max = math.Max(max, e)
			count++
		}
	}
	return avg / float64(count), max, clients
}

func square(n int, f func(i, j int) float64) [][]float64 {
	m := make([][]float64, n)
	for i := range m {
		m[i] = make([]float64, n)
		for j := range m[i] {
			if i != j {
				m[i][j] = f(i, j)
			}
		}
	}
	return m
}

func TestPerformance_Line(t *testing.T) {
	const spacing = 0.010
	truth := square(10, func(i, j int) float64 { return math.Abs(float64(i-j)) * spacing })
	avg, max, _ := simulate(t, DefaultConfig(), truth, 1000)
	t.Logf("line: avg %.4f max %.4f", avg, max)
	if avg > 0.005 || max > 0.02 {
		t.Fatalf("line: avg %.4f max %.4f out of spec", avg, max)
	}
}

func TestPerformance_Grid(t *testing.T) {
	const spacing = 0.010
	const side = 5
	truth := square(side*side, func(i, j int) float64 {
		dx := float64(i%side - j%side)
		dy := float64(i/side - j/side)
		return math.Hypot(dx, dy) * spacing
	})
	avg, max, _ := simulate(t, DefaultConfig(), truth, 1000)
	t.Logf("grid: avg %.4f max %.4f", avg, max)
	if avg > 0.005 || max > 0.03 {
		t.Fatalf("grid: avg %.4f max %.4f out of spec", avg, max)
	}
}

func TestPerformance_Split(t *testing.T) {
	// Two LANs (1 ms inside) 10 ms apart.
	const lan, wan = 0.001, 0.010
	truth := square(24, func(i, j int) float64 {
		if (i < 12) == (j < 12) {
			return lan
		}
		return wan
	})
	avg, max, _ := simulate(t, DefaultConfig(), truth, 1000)
	t.Logf("split: avg %.4f max %.4f", avg, max)
	if avg > 0.025 || max > 0.3 {
		t.Fatalf("split: avg %.4f max %.4f out of spec", avg, max)
	}
}

func TestPerformance_Height(t *testing.T) {
	// Node 0 sits "above" a circle of radius r: equally far (2r) from all.
	const radius = 0.100
	const n = 25
	pos := func(i int) (float64, float64) {
		a := 2 * math.Pi * float64(i) / float64(n)
		return math.Cos(a), math.Sin(a)
	}
	truth := square(n, func(i, j int) float64 {
		if i == 0 || j == 0 {
			return 2 * radius
		}
		x1, y1 := pos(i)
		x2, y2 := pos(j)
		return math.Hypot(x1-x2, y1-y2) * radius
	})
	cfg := DefaultConfig()
	cfg.Dimensions = 2
	avg, max, clients := simulate(t, cfg, truth, 1000)
	t.Logf("height: avg %.4f max %.4f, centre height %.4f", avg, max, clients[0].GetCoordinate().Height)
	if h := clients[0].GetCoordinate().Height; h < 0.9*radius {
		t.Fatalf("centre node height %.4f, want ≥ %.4f", h, 0.9*radius)
	}
	var hs []float64
	for _, c := range clients[1:] {
		hs = append(hs, c.GetCoordinate().Height)
	}
	sort.Float64s(hs)
	if hs[len(hs)/2] > 0.05*radius {
		t.Fatalf("median ring height %.4f, want ≤ %.4f", hs[len(hs)/2], 0.05*radius)
	}
	if avg > 0.005 || max > 0.02 {
		t.Fatalf("height: avg %.4f max %.4f out of spec", avg, max)
	}
}

func TestClient_Deterministic(t *testing.T) {
	truth := square(12, func(i, j int) float64 { return 0.01 + 0.003*math.Abs(float64(i-j)) })
	_, _, a := simulate(t, DefaultConfig(), truth, 50)
	_, _, b := simulate(t, DefaultConfig(), truth, 50)
	for i := range a {
		if fmt.Sprint(a[i].GetCoordinate()) != fmt.Sprint(b[i].GetCoordinate()) {
			t.Fatalf("node %d differs between identical runs", i)
		}
	}
}

func TestClient_Concurrent(t *testing.T) {
	// Run under -race: Update, getters and forgetNode from many goroutines.
	cfg := DefaultConfig()
	c := newTestClient(t, cfg, 1)
	done := make(chan struct{})
	for g := 0; g < 4; g++ {
		go func(g int) {
			defer func() { done <- struct{}{} }()
			o := newCoord(cfg.Dimensions, cfg.HeightMin, 1)
			o.Vec[0] = 0.001 * float64(g+1)
			for i := 0; i < 200; i++ {
				_ = c.Update(fmt.Sprint(g), o, time.Duration(g+1)*time.Millisecond)
				_ = c.GetCoordinate()
				_ = c.Stats()
				if i%50 == 0 {
					c.forgetNode(fmt.Sprint(g))
				}
			}
		}(g)
	}
	for g := 0; g < 4; g++ {
		<-done
	}
	if st := c.Stats(); st.Updates+st.RefusedOutlier+st.RefusedTriangle != 800 || c.GetCoordinate().Check() != nil {
		t.Fatalf("stats %+v, coordinate %v", st, c.GetCoordinate())
	}
}
