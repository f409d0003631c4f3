package vivaldi

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
)

// defenceOff is cfg with every defence against coordinate liars off.
func defenceOff(cfg Config) Config {
	cfg.OutlierFactor, cfg.OutlierMin, cfg.TriangleMargin, cfg.RemoteErrorMin = 0, 0, 0, 0
	return cfg
}

// ring is peer k of n on a circle of radius r (seconds) in 2 dimensions,
// with a 1 ms height and the given error.
func ring(k, n int, r, e float64) Coord {
	a := 2 * math.Pi * float64(k) / float64(n)
	return Coord{Vec: []float64{r * math.Cos(a), r * math.Sin(a)}, Height: 0.001, Error: e}
}

func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func mustUpdate(t *testing.T, c *Client, peer string, o Coord, rtt time.Duration) {
	t.Helper()
	if err := c.Update(peer, o, rtt); err != nil {
		t.Fatalf("honest sample from %s refused: %v", peer, err)
	}
}

// The triangle test refuses an inflated claim (a coordinate seconds away
// from every peer this node sampled, at a 50 ms RTT) from the first
// samples on, counts it, and leaves the coordinate as it was; honest
// samples before and after are taken.
func TestDefence_TriangleRefusesInflation(t *testing.T) {
	cfg := defenceOff(DefaultConfig())
	cfg.Dimensions = 2
	cfg.TriangleMargin = 2.5
	c := newTestClient(t, cfg, 1)
	for k := 0; k < 10; k++ {
		mustUpdate(t, c, fmt.Sprint("honest", k), ring(k, 10, 0.05, 0.5), 50*time.Millisecond)
	}
	before := c.GetCoordinate()
	liar := Coord{Vec: []float64{2, 0}, Height: 0.2, Error: 0.01}
	err := c.Update("liar", liar, 50*time.Millisecond)
	if !errors.Is(err, ErrImplausible) {
		t.Fatalf("inflated claim: err %v, want ErrImplausible", err)
	}
	st := c.Stats()
	if st.RefusedTriangle != 1 || st.RefusedOutlier != 0 || st.Updates != 10 {
		t.Fatalf("stats %+v, want 1 refused by the triangle test and 10 updates", st)
	}
	if after := c.GetCoordinate(); !reflect.DeepEqual(before, after) {
		t.Fatalf("refused sample moved the node: %v → %v", before, after)
	}
	mustUpdate(t, c, "honest3", ring(3, 10, 0.05, 0.5), 50*time.Millisecond)
	if st := c.Stats(); st.Updates != 11 {
		t.Fatalf("updates %d, want 11", st.Updates)
	}
	// With fewer than triMin peers sampled the test holds back.
	d := newTestClient(t, cfg, 1)
	for k := 0; k < triMin-1; k++ {
		mustUpdate(t, d, fmt.Sprint("honest", k), ring(k, 10, 0.05, 0.5), 50*time.Millisecond)
	}
	mustUpdate(t, d, "liar", liar, 50*time.Millisecond)
}

// settledClient is a node settled at the origin (error 0.1) that has taken
// 16 honest samples of 5% relative residual from peers on a 50 ms ring.
func settledClient(t *testing.T, cfg Config) *Client {
	t.Helper()
	c := newTestClient(t, cfg, 1)
	if err := c.SetCoordinate(Coord{Vec: []float64{0, 0}, Height: 0.001, Error: 0.1}); err != nil {
		t.Fatal(err)
	}
	me := c.GetCoordinate()
	for k := 0; k < 16; k++ {
		o := ring(k, 16, 0.05, 0.1)
		mustUpdate(t, c, fmt.Sprint("honest", k), o, secs(1.05*me.DistanceTo(o)))
	}
	return c
}

// The outlier test refuses a deflation liar (the origin, a tiny error) at
// a settled node whose recent samples fit well: its residual is far past
// OutlierFactor times theirs.
func TestDefence_OutlierRefusesDeflation(t *testing.T) {
	cfg := defenceOff(DefaultConfig())
	cfg.Dimensions = 2
	cfg.OutlierFactor, cfg.OutlierMin = 5, 0.4
	c := settledClient(t, cfg)
	before := c.GetCoordinate()
	liar := Coord{Vec: []float64{0, 0}, Height: 10e-6, Error: 0.01}
	err := c.Update("liar", liar, 60*time.Millisecond)
	if !errors.Is(err, ErrImplausible) {
		t.Fatalf("deflated claim: err %v, want ErrImplausible", err)
	}
	if st := c.Stats(); st.RefusedOutlier != 1 || st.RefusedTriangle != 0 || st.Updates != 16 {
		t.Fatalf("stats %+v, want 1 refused as an outlier and 16 updates", st)
	}
	if after := c.GetCoordinate(); !reflect.DeepEqual(before, after) {
		t.Fatalf("refused sample moved the node: %v → %v", before, after)
	}
	// An honest peer off by 20% (within 5 × 5% and 0.4) is taken.
	o := ring(3, 16, 0.05, 0.1)
	mustUpdate(t, c, "honest3", o, secs(1.2*c.GetCoordinate().DistanceTo(o)))

	// A node that has not settled refuses nothing: its own coordinate
	// is too far off to tell.
	u := settledClient(t, cfg)
	co := u.GetCoordinate()
	co.Error = cfg.SettledError
	if err := u.SetCoordinate(co); err != nil {
		t.Fatal(err)
	}
	mustUpdate(t, u, "liar", liar, 60*time.Millisecond)
	// Unless it has taken more than OutlierAfter samples.
	cfg.OutlierAfter = 16
	u = settledClient(t, cfg)
	if err := u.SetCoordinate(co); err != nil {
		t.Fatal(err)
	}
	if err := u.Update("liar", liar, 60*time.Millisecond); !errors.Is(err, ErrImplausible) || u.Stats().RefusedOutlier != 1 {
		t.Fatalf("unsettled after 16 samples: err %v, stats %+v", err, u.Stats())
	}

	// Without the defences the liar is taken.
	off := settledClient(t, defenceOff(cfg))
	mustUpdate(t, off, "liar", liar, 60*time.Millisecond)
}

// When most peers disagree with the node (it moved: every RTT is now three
// times what the coordinates say), their residuals raise the median and
// the node takes their samples again after at most half a window of
// refusals.
func TestDefence_OutlierLetsAChangeThrough(t *testing.T) {
	cfg := defenceOff(DefaultConfig())
	cfg.Dimensions = 2
	cfg.OutlierFactor, cfg.OutlierMin = 5, 0.4
	c := settledClient(t, cfg)
	refused, taken := 0, 0
	for k := 0; k < residWindow; k++ {
		o := ring(k, residWindow, 0.05, 0.1)
		err := c.Update(fmt.Sprint("moved", k), o, secs(3*c.GetCoordinate().DistanceTo(o)))
		switch {
		case err == nil:
			taken++
		case errors.Is(err, ErrImplausible):
			if taken > 0 {
				t.Fatalf("sample %d refused after the change got through", k)
			}
			refused++
		default:
			t.Fatal(err)
		}
	}
	if refused == 0 || refused > residWindow/2+1 || taken == 0 {
		t.Fatalf("%d refused, %d taken: want some refused, then the rest taken", refused, taken)
	}
	t.Logf("%d refused before the change got through", refused)
}

// RemoteErrorMin: a claimed error below the floor (or the node's own
// error, whichever is less) counts as the floor, exactly.
func TestDefence_RemoteErrorFloor(t *testing.T) {
	cfg := defenceOff(DefaultConfig())
	cfg.Dimensions = 2
	floored := cfg
	floored.RemoteErrorMin = 0.2
	for _, own := range []float64{cfg.ErrorMax, 0.1} {
		a, b := newTestClient(t, floored, 1), newTestClient(t, cfg, 1)
		start := Coord{Vec: []float64{0.01, 0}, Height: 0.001, Error: own}
		for _, c := range []*Client{a, b} {
			if err := c.SetCoordinate(start); err != nil {
				t.Fatal(err)
			}
		}
		claim := Coord{Vec: []float64{0.03, 0.01}, Height: 0.001, Error: 0.01}
		mustUpdate(t, a, "p", claim, 40*time.Millisecond)
		claim.Error = math.Min(0.2, own)
		mustUpdate(t, b, "p", claim, 40*time.Millisecond)
		if ca, cb := a.GetCoordinate(), b.GetCoordinate(); !reflect.DeepEqual(ca, cb) {
			t.Fatalf("own error %g: floored %v, claimed at the floor %v", own, ca, cb)
		}
		if st := a.Stats(); st.ErrorFloored != 1 {
			t.Fatalf("own error %g: floored %d, want 1", own, st.ErrorFloored)
		}
		// A claim above the floor is left alone.
		mustUpdate(t, a, "q", Coord{Vec: []float64{0.02, 0.02}, Height: 0.001, Error: 0.5}, 30*time.Millisecond)
		if st := a.Stats(); st.ErrorFloored != 1 {
			t.Fatalf("own error %g: floored %d after an honest claim, want 1", own, st.ErrorFloored)
		}
	}
}

func TestDefence_ConfigValidate(t *testing.T) {
	for name, f := range map[string]func(*Config){
		"OutlierFactor":  func(c *Config) { c.OutlierFactor = -1 },
		"OutlierAfter":   func(c *Config) { c.OutlierAfter = -1 },
		"OutlierMin":     func(c *Config) { c.OutlierMin = math.NaN() },
		"TriangleMargin": func(c *Config) { c.TriangleMargin = math.Inf(1) },
		"RemoteErrorMin": func(c *Config) { c.RemoteErrorMin = c.ErrorMax + 0.1 },
	} {
		cfg := DefaultConfig()
		f(&cfg)
		if err := cfg.Validate(); err == nil {
			t.Errorf("%s: bad value accepted", name)
		}
	}
	if err := defenceOff(DefaultConfig()).Validate(); err != nil {
		t.Fatalf("defences off: %v", err)
	}
}

// The service counts a reply the model refuses as implausible under the
// drop reason "implausible", and neither keeps the liar's coordinate nor
// takes it from the liar's own requests.
func TestService_ForgetsImplausiblePeer(t *testing.T) {
	_, hs := mockHosts(t, 2)
	cfg := DefaultConfig()
	cfg.Dimensions = 3
	b := newService(t, hs[1], WithConfig(cfg), WithInterval(0), WithSeed(2))
	for k := 0; k < 10; k++ {
		o := ring(k, 10, 0.05, 0.5)
		o.Vec = append(o.Vec, 0)
		if err := b.Client().Update(fmt.Sprint("honest", k), o, 50*time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	// hs[0] is a liar: it claims a point three seconds away.
	lie := pbCoord([]float64{3, 0, 0}, 0.2, 0.01)
	hs[0].SetStreamHandler(defaultID, func(st network.Stream) {
		defer st.Close()
		if _, err := readCoord(st, 3); err != nil {
			st.Reset()
			return
		}
		st.Write(frame(lie))
	})
	if _, err := b.Sample(context.Background(), hs[0].ID()); !errors.Is(err, ErrImplausible) {
		t.Fatalf("lying reply: err %v, want ErrImplausible", err)
	}
	if d := b.Drops()[dropImplausible]; d != 1 {
		t.Fatalf("drops[%s] = %d, want 1", dropImplausible, d)
	}
	if st := b.Stats().Model; st.RefusedTriangle != 1 || st.Updates != 10 {
		t.Fatalf("model stats %+v", st)
	}
	if c, ok := b.PeerCoordinate(hs[0].ID()); ok {
		t.Fatalf("kept the liar's coordinate %v", c)
	}
	// Its request carries the same lie; b answers but does not keep it.
	if err := rawExchange(t, hs[0], hs[1].ID(), frame(lie)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "request served", func() bool { return b.Stats().Served == 1 })
	if c, ok := b.PeerCoordinate(hs[0].ID()); ok {
		t.Fatalf("kept the liar's coordinate from its request %v", c)
	}
}

// upperMedian is the element of rank n/2, as sorting would find it.
func TestUpperMedian(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for n := 1; n <= 70; n++ {
		for trial := 0; trial < 20; trial++ {
			xs := make([]float64, n)
			for i := range xs {
				xs[i] = float64(rng.Intn(8)) // ties too
				if trial%2 == 0 {
					xs[i] = rng.NormFloat64()
				}
			}
			want := append([]float64(nil), xs...)
			sort.Float64s(want)
			if got := upperMedian(xs); got != want[n/2] {
				t.Fatalf("n %d: %v, want %v", n, got, want[n/2])
			}
		}
	}
}
