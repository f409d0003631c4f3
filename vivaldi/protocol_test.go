package vivaldi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand"
	"reflect"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
	"github.com/libp2p/go-msgio/pbio"

	"github.com/superpeer-overlay/superpeer/experiments/latency"
	"github.com/superpeer-overlay/superpeer/internal/connrtt"
	"github.com/superpeer-overlay/superpeer/vivaldi/pb"
)

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func mockHosts(t testing.TB, n int) (mocknet.Mocknet, []host.Host) {
	t.Helper()
	mn := mocknet.New()
	t.Cleanup(func() { mn.Close() })
	hs := make([]host.Host, n)
	for i := range hs {
		h, err := mn.GenPeer()
		if err != nil {
			t.Fatal(err)
		}
		hs[i] = h
	}
	if err := mn.LinkAll(); err != nil {
		t.Fatal(err)
	}
	if err := mn.ConnectAllButSelf(); err != nil {
		t.Fatal(err)
	}
	return mn, hs
}

func newService(t testing.TB, h host.Host, opts ...Option) *Service {
	t.Helper()
	s, err := NewService(h, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestNewService_Options(t *testing.T) {
	_, hs := mockHosts(t, 1)
	badCfg := DefaultConfig()
	badCfg.CC = 0
	for name, opt := range map[string]Option{
		"WithInterval":       WithInterval(-time.Second),
		"WithTimeout":        WithTimeout(0),
		"WithPeerSource":     WithPeerSource(nil),
		"WithNearFraction":   withNearFraction(math.NaN()),
		"WithNearCount":      withNearCount(0),
		"WithConfig":         WithConfig(badCfg),
		"WithNearConfig":     WithNearConfig(NearConfig{}),
		"WithMaxInFlight":    WithMaxInFlight(0),
		"WithClock":          WithClock(nil),
		"WithObserver":       WithObserver(nil),
		"WithConnRTT":        WithConnRTT(nil),
		"WithStallCheck":     WithStallCheck(nil),
		"WithTimeScale":      WithTimeScale(0.5),
		"WithProtocolPrefix": WithProtocolPrefix("superpeer"),
	} {
		_, err := NewService(hs[0], opt)
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: err = %v, want one naming the option", name, err)
		}
	}
	if _, err := NewService(nil); err == nil {
		t.Error("nil host accepted")
	}
}

// rawExchange opens a stream to p, writes b and reads until EOF or reset.
func rawExchange(t *testing.T, from host.Host, p peer.ID, b []byte) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := from.NewStream(ctx, p, defaultID)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	_ = st.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := st.Write(b); err != nil {
		return err
	}
	_ = st.CloseWrite()
	_, err = io.ReadAll(st)
	return err
}

func TestService_DropsBadRequests(t *testing.T) {
	_, hs := mockHosts(t, 2)
	cfg := DefaultConfig()
	cfg.Dimensions = 3
	a := newService(t, hs[0], WithConfig(cfg), WithInterval(0), WithSeed(1))
	bad := badFrames()
	bad[dropDecode+"/truncated"] = append(uvarint(10), 1, 2)
	for name, b := range bad {
		if err := rawExchange(t, hs[1], hs[0].ID(), b); err == nil {
			// A refused request gets no reply: the stream is reset.
			t.Errorf("%s: request answered", name)
		}
	}
	want := map[string]uint64{
		dropOversize: 1, dropDecode: 2, dropNoCoord: 1,
		dropNonFinite: 1, dropOutOfRange: 1, dropDimensions: 1,
	}
	waitFor(t, 5*time.Second, "drops counted", func() bool {
		d := a.Drops()
		for k, v := range want {
			if d[k] != v {
				return false
			}
		}
		return true
	})
	if a.Stats().Served != 0 {
		t.Fatalf("served %d bad requests", a.Stats().Served)
	}
	// And the service keeps answering good requests.
	b := newService(t, hs[1], WithConfig(cfg), WithInterval(0), WithSeed(2))
	for i := 0; i < 3; i++ {
		if _, err := b.Sample(context.Background(), hs[0].ID()); err != nil {
			t.Fatalf("good sample %d: %v", i, err)
		}
	}
	waitFor(t, 5*time.Second, "3 requests served", func() bool { return a.Stats().Served == 3 })
	if got := b.Client().Stats().Updates; got != 3 {
		t.Fatalf("b applied %d samples, want 3", got)
	}
	if _, ok := a.PeerCoordinate(hs[1].ID()); !ok {
		t.Fatal("a did not record b's coordinate")
	}
}

func TestService_DropsBadReply(t *testing.T) {
	_, hs := mockHosts(t, 2)
	cfg := DefaultConfig()
	cfg.Dimensions = 3
	b := newService(t, hs[1], WithConfig(cfg), WithInterval(0), WithSeed(2))
	// a is a liar: it answers every request with a NaN coordinate.
	hs[0].SetStreamHandler(defaultID, func(st network.Stream) {
		defer st.Close()
		if _, err := readCoord(st, 3); err != nil {
			st.Reset()
			return
		}
		st.Write(badFrames()[dropNonFinite])
	})
	if _, err := b.Sample(context.Background(), hs[0].ID()); err == nil {
		t.Fatal("NaN reply accepted")
	}
	if d := b.Drops()[dropNonFinite]; d != 1 {
		t.Fatalf("drops[%s] = %d, want 1", dropNonFinite, d)
	}
	if c := b.Coordinate(); c.Check() != nil || b.Client().Stats().Updates != 0 {
		t.Fatalf("bad reply reached the model: %v %+v", c, b.Client().Stats())
	}
	if st := b.Stats(); st.SampleFailure != 1 || st.Samples != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// Neighbour gossip over the real protocol: b has measured c; a samples b,
// hears of c in the reply, and measures it in its next near sample.
func TestService_GossipsNeighbours(t *testing.T) {
	_, hs := mockHosts(t, 3)
	cfg := DefaultConfig()
	cfg.Dimensions = 3
	only := func(p peer.ID) Option { return WithPeerSource(func() []peer.ID { return []peer.ID{p} }) }
	a := newService(t, hs[0], WithConfig(cfg), WithInterval(0), WithSeed(1), only(hs[1].ID()))
	b := newService(t, hs[1], WithConfig(cfg), WithInterval(0), WithSeed(2))
	c := newService(t, hs[2], WithConfig(cfg), WithInterval(0), WithSeed(3))
	ctx := context.Background()
	if _, err := b.Sample(ctx, hs[2].ID()); err != nil {
		t.Fatal(err)
	}
	if ns := b.nearSet(); len(ns) != 1 || ns[0].ID != hs[2].ID() || ns[0].RTT <= 0 {
		t.Fatalf("b's near set %v", ns)
	}
	if _, err := a.Sample(ctx, hs[1].ID()); err != nil {
		t.Fatal(err)
	}
	if st := a.Stats().Near; st.Candidates != 1 || st.Members != 1 {
		t.Fatalf("a's near stats %+v, want b a member and c a candidate", st)
	}
	// a's peer source names only b, so c can only have come from b's reply.
	var probed bool
	for i := 0; i < 4 && !probed; i++ {
		p, kind, _, err := a.Step(ctx)
		if err != nil {
			t.Fatal(err)
		}
		probed = kind == kindProbe && p == hs[2].ID()
	}
	if !probed {
		t.Fatal("a never measured the neighbour b told it of")
	}
	if len(a.nearSet()) != 2 || a.Stats().Probes != 1 {
		t.Fatalf("a's near set %v, stats %+v", a.nearSet(), a.Stats())
	}
	if _, ok := a.PeerCoordinate(hs[2].ID()); !ok {
		t.Fatal("a has no coordinate of c")
	}
	// c answered b and then a (counted just after the reply is sent).
	waitFor(t, 5*time.Second, "c to count 2 requests served", func() bool { return c.Stats().Served == 2 })
	for _, s := range []*Service{a, b, c} {
		if d := s.Drops(); len(d) != 0 {
			t.Fatalf("drops between honest peers: %v", d)
		}
	}
}

// A reply's malformed neighbour entries are refused and counted one by
// one; its coordinate and good entries are still used.
func TestService_RefusesBadNeighbours(t *testing.T) {
	_, hs := mockHosts(t, 2)
	cfg := DefaultConfig()
	cfg.Dimensions = 3
	b := newService(t, hs[1], WithConfig(cfg), WithInterval(0), WithSeed(2))
	good := []float64{0.01, 0.02, 0.03}
	hs[0].SetStreamHandler(defaultID, func(st network.Stream) {
		defer st.Close()
		if _, err := readCoord(st, 3); err != nil {
			st.Reset()
			return
		}
		m := pbCoord(good, 0.001, 0.5)
		// One good entry, then a repeat of it, one naming the asker and
		// one naming the replier, then two more than the asker asked for.
		m.Neighbors = []*pb.Neighbor{pbNeighbor(testID(t, 7), 0.002, good), pbNeighbor(testID(t, 7), 0.002, good),
			pbNeighbor(hs[1].ID(), 0.002, good), pbNeighbor(hs[0].ID(), 0.002, good),
			pbNeighbor(testID(t, 8), 0.002, good), pbNeighbor(testID(t, 9), 0.002, good)}
		st.Write(frame(m))
	})
	if _, err := b.Sample(context.Background(), hs[0].ID()); err != nil {
		t.Fatalf("a reply with bad neighbours refused whole: %v", err)
	}
	d := b.Drops()
	// The decoder keeps the first Share (4) entries that pass its checks:
	// 7, the asker, the replier and 8 (the repeat of 7 refused); 9 is
	// excess; the service then refuses the asker and the replier.
	if d[dropNeighborDup] != 3 || d[dropNeighborExcess] != 1 {
		t.Fatalf("drops %v", d)
	}
	if st := b.Stats(); st.Samples != 1 || st.Model.Updates != 1 || st.Near.Candidates != 2 {
		t.Fatalf("stats %+v", st)
	}
}

// Every kind of bad entry is counted under its reason (a reply carrying
// the good entry and one bad one).
func TestService_CountsEachBadNeighbour(t *testing.T) {
	_, hs := mockHosts(t, 2)
	cfg := DefaultConfig()
	cfg.Dimensions = 3
	b := newService(t, hs[1], WithConfig(cfg), WithInterval(0), WithSeed(2))
	good := []float64{0.01, 0.02, 0.03}
	bad := badNeighbors(t)
	next := make(chan *pb.Neighbor, len(bad))
	want := map[string]uint64{}
	for name, e := range bad {
		next <- e
		reason, _, _ := strings.Cut(name, "/")
		want[reason]++
	}
	hs[0].SetStreamHandler(defaultID, func(st network.Stream) {
		defer st.Close()
		if _, err := readCoord(st, 3); err != nil {
			st.Reset()
			return
		}
		m := pbCoord(good, 0.001, 0.5)
		m.Neighbors = []*pb.Neighbor{pbNeighbor(testID(t, 7), 0.002, good), <-next}
		st.Write(frame(m))
	})
	for range bad {
		if _, err := b.Sample(context.Background(), hs[0].ID()); err != nil {
			t.Fatal(err)
		}
	}
	d := b.Drops()
	for k, v := range want {
		if d[k] != v {
			t.Errorf("drops[%s] = %d, want %d (all: %v)", k, d[k], v, d)
		}
	}
}

// A peer that predates neighbour gossip sends requests without
// want_neighbors: it gets the reply it always got. And a request that
// carries neighbours has them refused and counted, and is answered.
func TestService_OldPeers(t *testing.T) {
	_, hs := mockHosts(t, 2)
	cfg := DefaultConfig()
	cfg.Dimensions = 3
	a := newService(t, hs[0], WithConfig(cfg), WithInterval(0), WithSeed(1))
	// Give a a near neighbour to share.
	b := newService(t, hs[1], WithConfig(cfg), WithInterval(0), WithSeed(2))
	if _, err := a.Sample(context.Background(), hs[1].ID()); err != nil {
		t.Fatal(err)
	}
	b.Close()
	exchange := func(req []byte) wireFrame {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := hs[1].NewStream(ctx, hs[0].ID(), defaultID)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		if _, err := st.Write(req); err != nil {
			t.Fatal(err)
		}
		f, err := readMessage(st, 3, maxShare)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	old := encodeCoord(Coord{Vec: []float64{0.01, 0, 0}, Height: 0.001, Error: 1})
	if f := exchange(old); len(f.Neighbors) != 0 {
		t.Fatalf("an old request got %d neighbours", len(f.Neighbors))
	}
	m := pbCoord([]float64{0.01, 0, 0}, 0.001, 1)
	m.WantNeighbors = 4
	m.Neighbors = []*pb.Neighbor{pbNeighbor(testID(t, 9), 0.002, []float64{0, 0, 0})}
	if f := exchange(frame(m)); len(f.Neighbors) != 0 {
		// a's only near neighbour is the asker itself, never shared.
		t.Fatalf("got %d neighbours: a shared the asker", len(f.Neighbors))
	}
	if d := a.Drops(); d[dropNeighborExcess] != 1 {
		t.Fatalf("drops %v, want the request's neighbour counted", d)
	}
}

// The background sampler starts a sample every interval without waiting
// for replies, up to WithMaxInFlight at once.
func TestService_SamplesWithoutWaiting(t *testing.T) {
	mn, hs := mockHosts(t, 2)
	for _, l := range mn.LinksBetweenPeers(hs[0].ID(), hs[1].ID()) {
		l.SetOptions(mocknet.LinkOptions{Latency: 50 * time.Millisecond})
	}
	newService(t, hs[1], WithInterval(0), WithSeed(2))
	a := newService(t, hs[0], WithInterval(5*time.Millisecond), WithMaxInFlight(3), WithSeed(1))
	waitFor(t, 10*time.Second, "samples and skipped ticks", func() bool {
		st := a.Stats()
		return st.Samples >= 6 && st.Skipped > 0
	})
	// 100 ms RTT, 3 in flight: about 30 samples a second, where waiting for
	// each reply would give under 10.
	start, n0 := time.Now(), a.Stats().Samples
	time.Sleep(time.Second)
	rate := float64(a.Stats().Samples-n0) / time.Since(start).Seconds()
	if rate < 15 || rate > 40 {
		t.Fatalf("%.1f samples/s, want about 30", rate)
	}
	a.SetInterval(time.Hour)
}

// TestService_Live runs the real protocol between 50 mocknet peers whose
// links carry a PlanetLab placement's latencies, and waits until the median
// relative error of their coordinates is under 0.25.
func TestService_Live(t *testing.T) {
	if testing.Short() {
		t.Skip("live swarm")
	}
	const n = 50
	// Latencies are PlanetLab's own. Smaller ones would run faster, but on a
	// loaded machine the scheduler's delays, which every sample also
	// measures, would then be a larger part of each RTT.
	const scale = 1.0
	m, err := latency.Builtin("planetlab-490")
	if err != nil {
		t.Fatal(err)
	}
	place, err := latency.Place(m.Filled(), n, 1)
	if err != nil {
		t.Fatal(err)
	}
	rtt := func(i, j int) time.Duration {
		return time.Duration(place.RTT(i, j) * scale * float64(time.Millisecond))
	}
	mn := mocknet.New()
	t.Cleanup(func() { mn.Close() })
	hs := make([]host.Host, n)
	for i := range hs {
		if hs[i], err = mn.GenPeer(); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			l, err := mn.LinkPeers(hs[i].ID(), hs[j].ID())
			if err != nil {
				t.Fatal(err)
			}
			l.SetOptions(mocknet.LinkOptions{Latency: rtt(i, j) / 2})
		}
	}
	if err := mn.ConnectAllButSelf(); err != nil {
		t.Fatal(err)
	}
	svcs := make([]*Service, n)
	for i := range svcs {
		svcs[i] = newService(t, hs[i], WithInterval(5*time.Millisecond), WithSeed(int64(i+1)))
	}
	liveError := func() (median, p90 float64) {
		coords := make([]Coord, n)
		for i, s := range svcs {
			coords[i] = s.Coordinate()
		}
		var errs []float64
		for i := 0; i < n; i++ {
			for j := i + 1; j < n; j++ {
				truth := rtt(i, j).Seconds()
				errs = append(errs, math.Abs(coords[i].DistanceTo(coords[j])-truth)/truth)
			}
		}
		sort.Float64s(errs)
		return errs[len(errs)/2], errs[len(errs)*9/10]
	}
	start := time.Now()
	var med, p90 float64
	waitFor(t, 45*time.Second, "median relative error < 0.25", func() bool {
		med, p90 = liveError()
		return med < 0.25
	})
	// Nothing between honest peers is malformed; the defence may refuse
	// an honest sample where PlanetLab's RTTs break the triangle
	// inequality, but rarely.
	var samples, drops, implausible uint64
	for _, s := range svcs {
		samples += s.Stats().Samples
		for why, d := range s.Drops() {
			if why == dropImplausible {
				implausible += d
			} else {
				drops += d
			}
		}
	}
	t.Logf("median %.3f p90 %.3f after %v, %d samples (%.0f per peer), %d drops, %d refused as implausible",
		med, p90, time.Since(start).Round(time.Millisecond), samples, float64(samples)/n, drops, implausible)
	if drops != 0 {
		t.Fatalf("%d frames dropped between honest peers", drops)
	}
	if implausible*20 > samples {
		t.Fatalf("%d of %d honest samples refused as implausible (more than 5%%)", implausible, samples)
	}
}

// recorder is a Piggyback that answers every request with its own data
// and records what it was given.
type recorder struct {
	mu      sync.Mutex
	out     []byte
	reqs    map[peer.ID][]byte
	replies map[peer.ID][]byte
}

func newRecorder(out string) *recorder {
	return &recorder{out: []byte(out), reqs: map[peer.ID][]byte{}, replies: map[peer.ID][]byte{}}
}

func (r *recorder) Request(p peer.ID) []byte { return r.out }
func (r *recorder) Reply(p peer.ID, req []byte) []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reqs[p] = req
	return r.out
}
func (r *recorder) Deliver(p peer.ID, b []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.replies[p] = b
}
func (r *recorder) got(p peer.ID) (req, reply []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reqs[p], r.replies[p]
}

// A piggyback rides on both halves of an exchange: the callee's Reply sees
// the request's data, the caller's Deliver the reply's; a service carries
// one at a time, and one without carries nothing and ignores what comes.
func TestService_Piggyback(t *testing.T) {
	_, hs := mockHosts(t, 3)
	a := newService(t, hs[0], WithInterval(0), WithSeed(1))
	b := newService(t, hs[1], WithInterval(0), WithSeed(2))
	c := newService(t, hs[2], WithInterval(0), WithSeed(3))
	ra, rb := newRecorder("from a"), newRecorder("from b")
	if err := a.SetPiggyback(ra); err != nil {
		t.Fatal(err)
	}
	if err := a.SetPiggyback(rb); err == nil {
		t.Fatal("a second piggyback was accepted")
	}
	if err := b.SetPiggyback(rb); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := a.Sample(ctx, hs[1].ID()); err != nil {
		t.Fatal(err)
	}
	if req, _ := rb.got(hs[0].ID()); string(req) != "from a" {
		t.Fatalf("b's Reply saw %q", req)
	}
	if _, rep := ra.got(hs[1].ID()); string(rep) != "from b" {
		t.Fatalf("a's Deliver got %q", rep)
	}
	// c carries none: it answers a's exchange, and a delivers nothing.
	if _, err := a.Sample(ctx, hs[2].ID()); err != nil {
		t.Fatal(err)
	}
	if _, rep := ra.got(hs[2].ID()); rep != nil {
		t.Fatalf("a delivered %q from a peer without a piggyback", rep)
	}
	// Removed, a piggyback is neither sent nor asked.
	if err := a.SetPiggyback(nil); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Sample(ctx, hs[1].ID()); err != nil {
		t.Fatal(err)
	}
	if req, _ := rb.got(hs[0].ID()); req != nil {
		t.Fatalf("b's Reply saw %q after a removed its piggyback", req)
	}
	for _, s := range []*Service{a, b, c} {
		if d := s.Drops(); len(d) != 0 {
			t.Fatalf("drops between honest peers: %v", d)
		}
	}
}

// A piggyback over MaxPiggyback is refused and counted; the coordinate in
// the frame is still used.
func TestService_OversizePiggyback(t *testing.T) {
	_, hs := mockHosts(t, 2)
	a := newService(t, hs[0], WithInterval(0), WithSeed(1))
	b := newService(t, hs[1], WithInterval(0), WithSeed(2))
	rb := newRecorder("")
	if err := b.SetPiggyback(rb); err != nil {
		t.Fatal(err)
	}
	st, err := hs[0].NewStream(context.Background(), hs[1].ID(), defaultID)
	if err != nil {
		t.Fatal(err)
	}
	m := toPB(a.Coordinate())
	m.Piggyback = make([]byte, MaxPiggyback+1)
	if err := pbio.NewDelimitedWriter(st).WriteMsg(m); err != nil {
		t.Fatal(err)
	}
	if _, err := readCoord(st, DefaultConfig().Dimensions); err != nil {
		t.Fatalf("b did not answer a frame with an oversize piggyback: %v", err)
	}
	st.Close()
	waitFor(t, 5*time.Second, "b to count the oversize piggyback", func() bool { return b.Drops()[dropPiggyback] == 1 })
	if req, _ := rb.got(hs[0].ID()); req != nil {
		t.Fatalf("b's Reply saw %d bytes of an oversize piggyback", len(req))
	}
	// b takes the caller's coordinate just after it has replied.
	waitFor(t, 5*time.Second, "b to take the coordinate of a frame whose piggyback was refused", func() bool {
		_, ok := b.PeerCoordinate(hs[0].ID())
		return ok
	})
}

// With a time scale f the service reports RTTs f times shorter than the
// link's: over a link of 40 ms each way (80 ms RTT), f = 4 gives about 20 ms.
func TestService_TimeScale(t *testing.T) {
	mn, hs := mockHosts(t, 2)
	for _, l := range mn.LinksBetweenPeers(hs[0].ID(), hs[1].ID()) {
		l.SetOptions(mocknet.LinkOptions{Latency: 40 * time.Millisecond})
	}
	a := newService(t, hs[0], WithInterval(0), WithSeed(1), WithTimeScale(4))
	newService(t, hs[1], WithInterval(0), WithSeed(2))
	rtt, err := a.Sample(context.Background(), hs[1].ID())
	if err != nil {
		t.Fatal(err)
	}
	if rtt < 20*time.Millisecond || rtt >= 40*time.Millisecond {
		t.Fatalf("scaled RTT %v over an 80 ms link, want 20 ms and a little", rtt)
	}
}

// SetTimeScale changes the scale while the service runs: the exchange
// timeout follows it (a link too slow for the timeout at scale 1 is
// measured at scale 2, halved), and a sample in flight across the change is
// discarded and counted, not fed to the model.
func TestService_SetTimeScale(t *testing.T) {
	mn, hs := mockHosts(t, 2)
	link := func(oneWay time.Duration) {
		for _, l := range mn.LinksBetweenPeers(hs[0].ID(), hs[1].ID()) {
			l.SetOptions(mocknet.LinkOptions{Latency: oneWay})
		}
	}
	a := newService(t, hs[0], WithInterval(0), WithSeed(1), WithTimeout(time.Second))
	b := newService(t, hs[1], WithInterval(0), WithSeed(2))
	for _, f := range []float64{0.5, 1001, math.NaN()} {
		if err := a.SetTimeScale(f); err == nil {
			t.Errorf("SetTimeScale(%v) accepted", f)
		}
	}
	link(300 * time.Millisecond) // 600 ms RTT: within the 1 s timeout
	if _, err := a.Sample(context.Background(), hs[1].ID()); err != nil {
		t.Fatal(err)
	}
	// The links stretch by 2, the service follows: 1.2 s of link RTT is
	// past the 1 s timeout unless the timeout was scaled too.
	link(600 * time.Millisecond)
	if err := a.SetTimeScale(2); err != nil {
		t.Fatal(err)
	}
	rtt, err := a.Sample(context.Background(), hs[1].ID())
	if err != nil {
		t.Fatalf("sample at scale 2 over a 1.2 s link: %v", err)
	}
	if rtt < 600*time.Millisecond || rtt >= 700*time.Millisecond {
		t.Fatalf("RTT %v at scale 2 over a 1.2 s link, want 600 ms and a little", rtt)
	}
	// A sample whose reply is on its way back when the scale changes.
	served := b.Stats().Served
	samples := a.Stats().Samples
	done := make(chan error, 1)
	go func() {
		_, err := a.Sample(context.Background(), hs[1].ID())
		done <- err
	}()
	waitFor(t, 5*time.Second, "b to answer the sample", func() bool { return b.Stats().Served > served })
	if err := a.SetTimeScale(1); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err == nil || !strings.Contains(err.Error(), "time scale") {
		t.Fatalf("a sample across the change: %v", err)
	}
	if got := a.Drops()[dropRescaled]; got != 1 {
		t.Errorf("rescaled drops %d, want 1", got)
	}
	if got := a.Stats().Samples; got != samples {
		t.Errorf("samples %d → %d: the discarded one was counted as a sample", samples, got)
	}
}

// With WithConnRTT a sample over real TCP is the kernel's RTT of the
// connection, not the timed exchange; over a connection of no transport
// the function knows (mocknet) the exchange is timed as before.
func TestService_ConnRTT(t *testing.T) {
	var hs []host.Host
	for range 2 {
		h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		hs = append(hs, h)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := hs[0].Connect(ctx, peer.AddrInfo{ID: hs[1].ID(), Addrs: hs[1].Addrs()}); err != nil {
		t.Fatal(err)
	}
	a := newService(t, hs[0], WithInterval(0), WithSeed(1), WithConnRTT(connrtt.Of))
	newService(t, hs[1], WithInterval(0), WithSeed(2))
	rtt, err := a.Sample(ctx, hs[1].ID())
	if err != nil {
		t.Fatal(err)
	}
	conns := hs[0].Network().ConnsToPeer(hs[1].ID())
	if len(conns) != 1 {
		t.Fatalf("%d connections", len(conns))
	}
	kernel, ok := connrtt.Of(conns[0])
	if runtime.GOOS != "linux" {
		if ok || a.Stats().TransportRTTs != 0 {
			t.Fatalf("a transport RTT off Linux: %v", kernel)
		}
		return
	}
	// The minimum can only have fallen since the sample read it.
	if !ok || rtt < kernel || rtt > 2*time.Millisecond || a.Stats().TransportRTTs != 1 {
		t.Fatalf("sample %v, kernel's minimum RTT %v (%v), %d transport samples", rtt, kernel, ok, a.Stats().TransportRTTs)
	}

	mn, ms := mockHosts(t, 2)
	for _, l := range mn.LinksBetweenPeers(ms[0].ID(), ms[1].ID()) {
		l.SetOptions(mocknet.LinkOptions{Latency: 10 * time.Millisecond})
	}
	b := newService(t, ms[0], WithInterval(0), WithSeed(1), WithConnRTT(connrtt.Of))
	newService(t, ms[1], WithInterval(0), WithSeed(2))
	if rtt, err := b.Sample(ctx, ms[1].ID()); err != nil || rtt < 20*time.Millisecond || b.Stats().TransportRTTs != 0 {
		t.Fatalf("mocknet sample %v (%v), %d transport samples", rtt, err, b.Stats().TransportRTTs)
	}
}

// A sample timed across a stall of this process (WithStallCheck) is
// discarded: Sample says ErrStalled, the model and the observer never see
// the RTT, the drop is counted, and the reply's piggyback is still
// delivered. The check is asked about the span the exchange was timed in.
func TestService_StallCheck(t *testing.T) {
	mn, hs := mockHosts(t, 2)
	for _, l := range mn.LinksBetweenPeers(hs[0].ID(), hs[1].ID()) {
		l.SetOptions(mocknet.LinkOptions{Latency: 10 * time.Millisecond})
	}
	var (
		mu        sync.Mutex
		stall     bool
		spans     []time.Duration
		observed  int
		discarded []time.Duration
	)
	check := func(start, end time.Time) bool {
		mu.Lock()
		defer mu.Unlock()
		spans = append(spans, end.Sub(start))
		return stall
	}
	observe := func(peer.ID, time.Duration) { mu.Lock(); observed++; mu.Unlock() }
	observeStalled := func(_ peer.ID, rtt time.Duration) { mu.Lock(); discarded = append(discarded, rtt); mu.Unlock() }
	a := newService(t, hs[0], WithInterval(0), WithSeed(1), WithStallCheck(check), WithObserver(observe), WithStalledObserver(observeStalled))
	b := newService(t, hs[1], WithInterval(0), WithSeed(2))
	ra, rb := newRecorder("from a"), newRecorder("from b")
	if err := a.SetPiggyback(ra); err != nil {
		t.Fatal(err)
	}
	if err := b.SetPiggyback(rb); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if rtt, err := a.Sample(ctx, hs[1].ID()); err != nil || rtt < 20*time.Millisecond {
		t.Fatalf("clear sample: %v, %v", rtt, err)
	}
	before := a.Coordinate()
	mu.Lock()
	stall = true
	mu.Unlock()
	ra.mu.Lock()
	ra.replies = map[peer.ID][]byte{}
	ra.mu.Unlock()
	rtt, err := a.Sample(ctx, hs[1].ID())
	if !errors.Is(err, ErrStalled) || rtt != 0 {
		t.Fatalf("stalled sample: %v, %v; want ErrStalled", rtt, err)
	}
	if _, rep := ra.got(hs[1].ID()); string(rep) != "from b" {
		t.Errorf("the stalled exchange's piggyback was not delivered: %q", rep)
	}
	st := a.Stats()
	if st.Samples != 1 || st.SampleFailure != 0 || st.Model.Updates != 1 {
		t.Errorf("stats %+v: want the clear sample alone counted, no failure", st)
	}
	if got := a.Coordinate(); !reflect.DeepEqual(got, before) {
		t.Errorf("the stalled sample moved the coordinate: %v -> %v", before, got)
	}
	if d := a.Drops(); d[dropStalled] != 1 || len(d) != 1 {
		t.Errorf("drops %v, want one %q", d, dropStalled)
	}
	mu.Lock()
	defer mu.Unlock()
	if observed != 1 {
		t.Errorf("the observer saw %d samples, want the clear one", observed)
	}
	if len(discarded) != 1 || discarded[0] < 20*time.Millisecond {
		t.Errorf("the stalled observer saw %v, want the discarded RTT (20 ms and more)", discarded)
	}
	if len(spans) != 2 || spans[0] < 20*time.Millisecond || spans[1] < 20*time.Millisecond {
		t.Errorf("spans checked %v: want the two exchanges' (20 ms and more)", spans)
	}
}

// defaultID is the exchange's protocol ID without WithProtocolPrefix, as
// peers of earlier versions speak it.
const defaultID protocol.ID = "/superpeer/vivaldi/1.0.0"

// TestService_ProtocolPrefix: the default ID is unchanged, and services
// under two prefixes on the same hosts answer only their own: a sample of
// one overlay is served by the other's service never, and fails where only
// the other runs.
func TestService_ProtocolPrefix(t *testing.T) {
	_, hs := mockHosts(t, 3)
	def := newService(t, hs[2], WithInterval(0))
	if def.ProtocolPrefix() != "/superpeer" || exchangeProtocol(def.ProtocolPrefix()) != defaultID || !slices.Contains(hs[2].Mux().Protocols(), defaultID) {
		t.Fatalf("default prefix %q, protocols %v; want %s", def.ProtocolPrefix(), hs[2].Mux().Protocols(), defaultID)
	}
	a0 := newService(t, hs[0], WithInterval(0), WithProtocolPrefix("/a"), WithSeed(1))
	a1 := newService(t, hs[1], WithInterval(0), WithProtocolPrefix("/a"), WithSeed(2))
	b0 := newService(t, hs[0], WithInterval(0), WithProtocolPrefix("/b"), WithSeed(3))
	b1 := newService(t, hs[1], WithInterval(0), WithProtocolPrefix("/b"), WithSeed(4))
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		if _, err := a0.Sample(ctx, hs[1].ID()); err != nil {
			t.Fatalf("an /a sample: %v", err)
		}
	}
	if _, err := b0.Sample(ctx, hs[1].ID()); err != nil {
		t.Fatalf("a /b sample: %v", err)
	}
	waitFor(t, 5*time.Second, "the samples served", func() bool { return a1.Stats().Served == 3 && b1.Stats().Served == 1 })
	if _, ok := b1.PeerCoordinate(hs[0].ID()); !ok {
		t.Error("the /b service did not hear its own overlay's coordinate")
	}
	// Neither overlay answers the default one, nor the default the others.
	if _, err := def.Sample(ctx, hs[0].ID()); err == nil {
		t.Error("a host of /a and /b answered a default sample")
	}
	if _, err := a0.Sample(ctx, hs[2].ID()); err == nil {
		t.Error("a default host answered an /a sample")
	}
	if def.Stats().Served != 0 || def.Stats().SampleFailure != 1 || a0.Stats().SampleFailure != 1 {
		t.Errorf("default served %d, failed %d; /a failed %d: want 0, 1, 1", def.Stats().Served, def.Stats().SampleFailure, a0.Stats().SampleFailure)
	}
}

// nearSet is the near neighbours with their RTT estimates, lowest first.
func (s *Service) nearSet() []nearPeer {
	s.mu.Lock()
	defer s.mu.Unlock()
	sh := s.near.Nearest(s.cfg.near.Size, "")
	out := make([]nearPeer, len(sh))
	for i, x := range sh {
		out[i] = nearPeer{ID: peer.ID(x.ID), RTT: time.Duration(x.RTT * float64(time.Second))}
	}
	return out
}

// nearPeer is a near neighbour and the least of its recent RTT samples.
type nearPeer struct {
	ID  peer.ID
	RTT time.Duration
}

// NearestPeers gives the same peers, in the same order (distance, then ID),
// as sorting every coordinate the service holds, for every k and with
// peers skipped; the coordinates are copies.
func TestService_NearestPeers(t *testing.T) {
	_, hs := mockHosts(t, 1)
	s := newService(t, hs[0])
	rng := rand.New(rand.NewSource(9))
	known := map[peer.ID]Coord{}
	for i := range 80 {
		p := peer.ID(fmt.Sprintf("p%02d", i))
		// A coarse grid, so that distances tie.
		c := Coord{Vec: []float64{float64(rng.Intn(6)) / 1000, float64(rng.Intn(6)) / 1000}, Height: 0.001, Error: 1}
		if i%17 == 0 {
			c = Coord{Vec: []float64{0, 0, 0}, Height: 0.001, Error: 1} // other dimensions: never
		}
		known[p] = c
		s.Remember(p, c)
	}
	to := Coord{Vec: []float64{0.002, 0.003}, Height: 0.001, Error: 1}
	skip := func(p peer.ID) bool { return p[len(p)-1] == '3' }
	var want []peer.ID
	for p, c := range known {
		if len(c.Vec) == 2 && !skip(p) {
			want = append(want, p)
		}
	}
	sort.Slice(want, func(i, j int) bool {
		di, dj := to.DistanceTo(known[want[i]]), to.DistanceTo(known[want[j]])
		return di < dj || (di == dj && want[i] < want[j])
	})
	for k := 0; k <= len(known)+1; k++ {
		ids, coords := s.NearestPeers(to, k, skip)
		if w := want[:min(k, len(want))]; fmt.Sprint(ids) != fmt.Sprint(w) {
			t.Fatalf("k %d: got %v, want %v", k, ids, w)
		}
		for i, p := range ids {
			if !reflect.DeepEqual(coords[i], known[p]) {
				t.Fatalf("k %d: %s at %v, want %v", k, p, coords[i], known[p])
			}
		}
	}
	ids, coords := s.NearestPeers(to, 1, nil)
	coords[0].Vec[0] = 99
	if c, _ := s.PeerCoordinate(ids[0]); c.Vec[0] == 99 {
		t.Fatal("NearestPeers returned the service's own coordinate, not a copy")
	}
	if ids, _ := s.NearestPeers(Coord{}, 3, nil); ids != nil {
		t.Fatalf("an invalid target gave %v", ids)
	}
}

// BenchmarkService_Pick is a sampling loop's choice of the next peer, with
// a peer source that lists 150 peers (a new slice each call, as a routing
// table's list is) of which 40 are connected: the allocations are what
// each of a swarm's thousands of services pays every interval.
func BenchmarkService_Pick(b *testing.B) {
	_, hs := mockHosts(b, 41)
	listed := make([]peer.ID, 0, 150)
	for _, h := range hs[1:] {
		listed = append(listed, h.ID())
	}
	for i := len(listed); i < 150; i++ {
		listed = append(listed, peer.ID(fmt.Sprintf("unconnected-%03d", i)))
	}
	source := func() []peer.ID { return append([]peer.ID(nil), listed...) }
	s := newService(b, hs[0], WithInterval(time.Hour), WithPeerSource(source), WithTidyConns(true))
	s.mu.Lock()
	for i, h := range hs[1:9] {
		s.near.Observe(string(h.ID()), float64(10+i)/1000)
	}
	s.mu.Unlock()
	b.ReportAllocs()
	for b.Loop() {
		if _, _, ok := s.pick(); !ok {
			b.Fatal("no pick")
		}
	}
}
