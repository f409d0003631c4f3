package superpeer

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	coreconnmgr "github.com/libp2p/go-libp2p/core/connmgr"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/net/connmgr"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
	"github.com/libp2p/go-msgio/pbio"
	"google.golang.org/protobuf/proto"

	"github.com/superpeer-overlay/superpeer/internal/frame"
	"github.com/superpeer-overlay/superpeer/superpeer/pb"
)

// fakeClock is a settable clock for TTL tests.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func hosts(t *testing.T, n int) []host.Host {
	t.Helper()
	mn, err := mocknet.FullMeshConnected(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mn.Close() })
	return mn.Hosts()
}

func attachAll(t *testing.T, hs []host.Host, opts ...Option) []*Attach {
	t.Helper()
	out := make([]*Attach, len(hs))
	for i, h := range hs {
		a, err := NewAttach(h, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(a.Close)
		out[i] = a
	}
	return out
}

func asRole(r Role, sp peer.ID) func() (Role, peer.ID) {
	return func() (Role, peer.ID) { return r, sp }
}

func TestAttach_CapacityTTLAndLeave(t *testing.T) {
	hs := hosts(t, 4)
	clock := &fakeClock{now: time.Unix(1000, 0)}
	as := attachAll(t, hs, attachWith(attachOptions{Capacity: 2, TTL: 10 * time.Second, Now: clock.Now}))
	sp := as[0]
	sp.SetRole(asRole(Superpeer, hs[0].ID()))
	ctx := context.Background()
	for i := 1; i <= 2; i++ {
		ans, err := as[i].Request(ctx, hs[0].ID(), false, []float64{0.01, 0.02}, 0.001)
		if err != nil || ans.Status != Accepted || ans.Load != i || ans.Capacity != 2 || ans.TTL != 10*time.Second {
			t.Fatalf("client %d: %+v, %v", i, ans, err)
		}
	}
	ans, err := as[3].Request(ctx, hs[0].ID(), false, nil, 0)
	if err != nil || ans.Status != Full || ans.Load != 2 {
		t.Fatalf("third client: %+v, %v; want FULL at load 2", ans, err)
	}
	// The superpeer keeps the coordinate each client sent.
	if cc := sp.ClientCoords(); len(cc) != 2 || cc[hs[1].ID()].Height != 0.001 || len(cc[hs[2].ID()].Vec) != 2 || cc[hs[2].ID()].Vec[1] != 0.02 {
		t.Fatalf("client coordinates %v", cc)
	}
	// A renewal from a client already served is accepted when full.
	if ans, _ := as[1].Request(ctx, hs[0].ID(), false, nil, 0); ans.Status != Accepted {
		t.Errorf("renewal refused: %+v", ans)
	}
	// Silence: client 2 expires after the TTL, client 1 renewed just now.
	clock.Add(6 * time.Second)
	as[1].Request(ctx, hs[0].ID(), false, nil, 0)
	clock.Add(6 * time.Second)
	if got := sp.Clients(); len(got) != 1 || got[0] != hs[1].ID() {
		t.Fatalf("after client 2's silence: clients %v", got)
	}
	// Client 1 renewed without a coordinate: none is kept for it, and
	// the expired client's is gone.
	if cc := sp.ClientCoords(); len(cc) != 0 {
		t.Fatalf("client coordinates after a renewal without one and an expiry: %v", cc)
	}
	if ans, _ := as[3].Request(ctx, hs[0].ID(), false, nil, 0); ans.Status != Accepted {
		t.Errorf("room freed by expiry not given: %+v", ans)
	}
	if ans, _ := as[1].Request(ctx, hs[0].ID(), true, nil, 0); ans.Status != Accepted || sp.Load() != 1 {
		t.Errorf("leave: %+v, load %d", ans, sp.Load())
	}
	if sp.Stats.RefusedFull.Load() != 1 || sp.Stats.Accepted.Load() < 4 {
		t.Errorf("stats: full %d accepted %d", sp.Stats.RefusedFull.Load(), sp.Stats.Accepted.Load())
	}
}

func TestAttach_NotSuperpeerHintsAndTellsTheSelector(t *testing.T) {
	hs := hosts(t, 3)
	as := attachAll(t, hs)
	as[1].SetRole(asRole(Client, hs[2].ID()))
	poked := make(chan struct{}, 1)
	as[1].onRefusedAsNonSuperpeer(func() { poked <- struct{}{} })
	ans, err := as[0].Request(context.Background(), hs[1].ID(), false, nil, 0)
	if err != nil || ans.Status != NotSuperpeer || ans.Hint != hs[2].ID() {
		t.Fatalf("%+v, %v; want NOT_SUPERPEER hinting %s", ans, err, hs[2].ID())
	}
	select {
	case <-poked:
	default:
		t.Error("the refusing peer's selector was not told")
	}
}

func TestAttach_BadFramesAreCountedAndServiceGoesOn(t *testing.T) {
	hs := hosts(t, 2)
	as := attachAll(t, hs)
	as[1].SetRole(asRole(Superpeer, hs[1].ID()))
	ctx := context.Background()
	send := func(msg proto.Message, raw []byte) {
		s, err := hs[0].NewStream(ctx, hs[1].ID(), defaultAttachID)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if msg != nil {
			pbio.NewDelimitedWriter(s).WriteMsg(msg)
		} else {
			s.Write(raw)
		}
		s.CloseWrite()
		var one [1]byte
		s.Read(one[:])
	}
	send(nil, []byte{0x03, 0xff, 0xff, 0xff})                              // not a protobuf
	send(nil, append([]byte{0xe8, 0x07}, make([]byte, 1000)...))           // over the cap
	send(&pb.AttachRequest{Coord: []float64{math.NaN()}}, nil)             // NaN coordinate
	send(&pb.AttachRequest{Coord: make([]float64, maxCoordDims+1)}, nil)   // too many dimensions
	send(&pb.AttachRequest{Coord: []float64{1}, Height: math.Inf(1)}, nil) // infinite height
	d := as[1].Drops()
	if d[dropAttachDecode] != 2 || d[dropAttachCoord] != 3 {
		t.Errorf("drops %v, want decode 2, bad-coord 3", d)
	}
	if as[1].Load() != 0 {
		t.Error("a bad frame attached a client")
	}
	if ans, err := as[0].Request(ctx, hs[1].ID(), false, []float64{0.1}, 0.01); err != nil || ans.Status != Accepted {
		t.Errorf("after bad frames: %+v, %v", ans, err)
	}
}

func TestAttach_DecodeAnswerRefusesUnknownStatusAndBadHint(t *testing.T) {
	hs := hosts(t, 1)
	a := attachAll(t, hs)[0]
	if _, err := a.decodeAnswer(&pb.AttachResponse{Status: 7}, "x"); err == nil {
		t.Error("unknown status accepted")
	}
	ans, err := a.decodeAnswer(&pb.AttachResponse{Status: pb.AttachResponse_NOT_SUPERPEER, Hint: []byte("junk")}, "x")
	if err != nil || ans.Hint != "" {
		t.Errorf("bad hint: %+v, %v", ans, err)
	}
	if d := a.Drops(); d[dropAttachStatus] != 1 || d[dropAttachHint] != 1 {
		t.Errorf("drops %v", d)
	}
	if _, err := NewAttach(hs[0], WithCapacity(-1)); err == nil {
		t.Error("negative capacity accepted")
	}
}

// FuzzAttachFrames feeds arbitrary bytes to both decoders: the superpeer's
// request reader with its validation, and the client's answer decoder.
func FuzzAttachFrames(f *testing.F) {
	req, _ := proto.Marshal(&pb.AttachRequest{Coord: []float64{0.1, 0.2}, Height: 0.01, RegretUs: -2500})
	f.Add(append([]byte{byte(len(req))}, req...))
	resp, _ := proto.Marshal(&pb.AttachResponse{Status: pb.AttachResponse_FULL, Hint: []byte("x"), Load: 3})
	f.Add(append([]byte{byte(len(resp))}, resp...))
	f.Add([]byte{0xff, 0xff, 0xff, 0x0f})
	notice, _ := proto.Marshal(&pb.AttachRequest{Dropped: true})
	f.Add(append([]byte{byte(len(notice))}, notice...))
	a := &Attach{}
	f.Fuzz(func(t *testing.T, b []byte) {
		var r pb.AttachRequest
		if err := pbio.NewDelimitedReader(bytesReader(b), maxAttachFrame).ReadMsg(&r); err == nil {
			if validCoord(r.Coord, r.Height) {
				for _, v := range r.Coord {
					if math.IsNaN(v) || math.IsInf(v, 0) {
						t.Fatal("validCoord passed a non-finite coordinate")
					}
				}
			}
		}
		var resp pb.AttachResponse
		if err := pbio.NewDelimitedReader(bytesReader(b), maxAttachFrame).ReadMsg(&resp); err == nil {
			if ans, err := a.decodeAnswer(&resp, "x"); err == nil && ans.Hint != "" && ans.Hint.Validate() != nil {
				t.Fatal("decoded an invalid hint")
			}
		}
	})
}

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }

// TestAttach_NoticeFromAnotherPeerChangesNothing: a notice that the sender
// dropped this peer counts only from this peer's own superpeer; from any
// other (late, or made up) it is counted as stale and changes nothing.
func TestAttach_NoticeFromAnotherPeerChangesNothing(t *testing.T) {
	hs := hosts(t, 3)
	as := attachAll(t, hs, attachWith(attachOptions{Capacity: 2, TTL: time.Minute}))
	as[0].SetRole(asRole(Superpeer, hs[0].ID()))
	heard := make(chan peer.ID, 2)
	as[1].OnDropped(func(sp peer.ID) { heard <- sp })
	ctx := context.Background()
	if ans, err := as[1].Request(ctx, hs[0].ID(), false, nil, 0); err != nil || ans.Status != Accepted {
		t.Fatalf("attach: %+v, %v", ans, err)
	}
	resp, err := as[2].exchange(ctx, hs[1].ID(), &pb.AttachRequest{Dropped: true})
	if err != nil || resp.Status != pb.AttachResponse_ACCEPTED {
		t.Fatalf("notice from another peer: %v, %v", resp, err)
	}
	if as[1].upstreamNow() != hs[0].ID() || as[1].Drops()[dropAttachStale] != 1 || as[1].Stats.Heard.Load() != 0 {
		t.Fatalf("after a stranger's notice: upstream %s, %d stale, %d heard; want the superpeer, 1, 0",
			as[1].upstreamNow(), as[1].Drops()[dropAttachStale], as[1].Stats.Heard.Load())
	}
	// The superpeer's own notice (as after a displacement) is heard.
	if _, err := as[0].exchange(ctx, hs[1].ID(), &pb.AttachRequest{Dropped: true}); err != nil {
		t.Fatal(err)
	}
	select {
	case sp := <-heard:
		if sp != hs[0].ID() {
			t.Fatalf("heard %s, want the superpeer", sp)
		}
	default:
		t.Fatal("the superpeer's notice was not heard")
	}
	if as[1].upstreamNow() != "" || as[1].Stats.Heard.Load() != 1 {
		t.Fatalf("after the superpeer's notice: upstream %s, %d heard", as[1].upstreamNow(), as[1].Stats.Heard.Load())
	}
	// A second notice from it is stale: it is no longer this peer's.
	if _, err := as[0].exchange(ctx, hs[1].ID(), &pb.AttachRequest{Dropped: true}); err != nil {
		t.Fatal(err)
	}
	if as[1].Drops()[dropAttachStale] != 2 || len(heard) != 0 {
		t.Fatalf("a repeated notice: %d stale, %d heard", as[1].Drops()[dropAttachStale], len(heard))
	}
}

// cmHost is a mocknet host with a real connection manager (mocknet's hosts
// have none).
type cmHost struct {
	host.Host
	cm *connmgr.BasicConnMgr
}

func (h cmHost) ConnManager() coreconnmgr.ConnManager { return h.cm }

// TestAttach_ProtectsAttachedConnections: a superpeer protects the
// connection to each client it serves until the client leaves or expires,
// and a client the one to the superpeer that accepted it, moving it when
// another accepts it and dropping it when refused — so a connection
// manager never trims an attachment.
func TestAttach_ProtectsAttachedConnections(t *testing.T) {
	raw := hosts(t, 4)
	hs := make([]host.Host, len(raw))
	cms := make([]*connmgr.BasicConnMgr, len(raw))
	for i, h := range raw {
		cm, err := connmgr.NewConnManager(1, 2)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cm.Close() })
		cms[i], hs[i] = cm, cmHost{h, cm}
	}
	clock := &fakeClock{now: time.Unix(1000, 0)}
	as := attachAll(t, hs, attachWith(attachOptions{Capacity: 1, TTL: 10 * time.Second, Now: clock.Now}))
	as[0].SetRole(asRole(Superpeer, hs[0].ID()))
	as[1].SetRole(asRole(Superpeer, hs[1].ID()))
	ctx := context.Background()
	client, up := hs[2].ID(), func() bool { return cms[2].IsProtected(hs[0].ID(), protectUpstream) }

	if ans, err := as[2].Request(ctx, hs[0].ID(), false, nil, 0); err != nil || ans.Status != Accepted {
		t.Fatalf("attach: %+v, %v", ans, err)
	}
	if !cms[0].IsProtected(client, protectClient) || !up() || as[2].upstreamNow() != hs[0].ID() {
		t.Fatalf("after attaching: superpeer protects client %v, client protects superpeer %v, upstream %v",
			cms[0].IsProtected(client, protectClient), up(), as[2].upstreamNow())
	}
	// Another superpeer takes the client: the protection moves.
	if ans, _ := as[2].Request(ctx, hs[1].ID(), false, nil, 0); ans.Status != Accepted {
		t.Fatalf("second superpeer: %+v", ans)
	}
	if up() || !cms[2].IsProtected(hs[1].ID(), protectUpstream) {
		t.Errorf("upstream protection did not move: old %v new %v", up(), cms[2].IsProtected(hs[1].ID(), protectUpstream))
	}
	// Refused by its superpeer (now full with another client after expiry): none.
	clock.Add(11 * time.Second)
	if as[1].Load() != 0 || cms[1].IsProtected(client, protectClient) {
		t.Errorf("expired client still counted or protected: load %d", as[1].Load())
	}
	if ans, _ := as[3].Request(ctx, hs[1].ID(), false, nil, 0); ans.Status != Accepted {
		t.Fatalf("other client: %+v", ans)
	}
	if ans, _ := as[2].Request(ctx, hs[1].ID(), false, nil, 0); ans.Status != Full {
		t.Fatalf("want FULL, got %+v", ans)
	}
	if as[2].upstreamNow() != "" || cms[2].IsProtected(hs[1].ID(), protectUpstream) {
		t.Errorf("refused client still protects its old superpeer (upstream %v)", as[2].upstreamNow())
	}
	// Leaving unprotects on the superpeer's side; DropClients clears all.
	if ans, _ := as[2].Request(ctx, hs[0].ID(), true, nil, 0); ans.Status != Accepted {
		t.Fatalf("leave: %+v", ans)
	}
	if cms[0].IsProtected(client, protectClient) {
		t.Error("superpeer still protects a client that left")
	}
	as[1].DropClients()
	if cms[1].IsProtected(hs[3].ID(), protectClient) {
		t.Error("DropClients left a client protected")
	}
}

// A full superpeer with Displace takes a newcomer in place of the served
// client of least regret when the newcomer's regret exceeds it by more than
// Displace; the displaced client is refused at its next renewal, and its
// connection is no longer protected. Without Displace, or with no regret
// said, it is first come, first served.
func TestAttach_DisplacesTheClientThatLosesLeast(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name     string
		displace time.Duration
		second   time.Duration // client 2's regret (client 1's is 20 ms)
		regret   time.Duration // the newcomer's
		want     Status
		victim   int // client displaced, 0 for none
	}{
		{"regret well above the least", ms, 3500 * time.Microsecond, 10 * ms, Accepted, 2},
		{"no other choice", ms, 3500 * time.Microsecond, maxRegret, Accepted, 2},
		{"within the margin", ms, 3500 * time.Microsecond, 4 * ms, Full, 0},
		{"a served client that would gain by going", ms, -5 * ms, 500 * time.Microsecond, Accepted, 2},
		{"no regret said", ms, -5 * ms, 0, Full, 0},
		{"displacement off", -1, 3500 * time.Microsecond, maxRegret, Full, 0},
		{"the default margin (2 ms)", 0, 3500 * time.Microsecond, 6 * ms, Accepted, 2},
		{"within the default margin", 0, 3500 * time.Microsecond, 5400 * time.Microsecond, Full, 0},
		// SetRegretBound at 4 ms: no other choice is taken as 4 ms.
		{"no other choice, bounded", ms, 3500 * time.Microsecond, maxRegret, Full, 0},
		{"no other choice, bounded over the margin", ms, 2 * ms, maxRegret, Accepted, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw := hosts(t, 4)
			hs := make([]host.Host, len(raw))
			for i, h := range raw {
				cm, err := connmgr.NewConnManager(8, 16)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { cm.Close() })
				hs[i] = cmHost{h, cm}
			}
			as := attachAll(t, hs, attachWith(attachOptions{Capacity: 2, TTL: time.Minute, Displace: tc.displace}))
			dropped := make(chan [2]peer.ID, len(as))
			for i, a := range as {
				a.OnDropped(func(sp peer.ID) { dropped <- [2]peer.ID{hs[i].ID(), sp} })
			}
			sp := as[0]
			sp.SetRole(asRole(Superpeer, hs[0].ID()))
			bounded := strings.Contains(tc.name, "bounded")
			if bounded {
				sp.SetRegretBound(func(ClientCoord) time.Duration { return 4 * ms })
			}
			ctx := context.Background()
			for i, r := range map[int]time.Duration{1: 20 * ms, 2: tc.second} {
				if ans, err := as[i].RequestWith(ctx, hs[0].ID(), ClientRequest{Regret: r}); err != nil || ans.Status != Accepted {
					t.Fatalf("client %d: %+v, %v", i, ans, err)
				}
			}
			ans, err := as[3].RequestWith(ctx, hs[0].ID(), ClientRequest{Regret: tc.regret})
			if err != nil || ans.Status != tc.want || ans.Load != 2 {
				t.Fatalf("newcomer: %+v, %v; want %v at load 2", ans, err, tc.want)
			}
			clients := map[peer.ID]bool{}
			for _, p := range sp.Clients() {
				clients[p] = true
			}
			cm := hs[0].ConnManager()
			for i := 1; i <= 3; i++ {
				served := i != tc.victim && (i != 3 || tc.want == Accepted)
				if clients[hs[i].ID()] != served || cm.IsProtected(hs[i].ID(), protectClient) != served {
					t.Errorf("client %d: served %v, protected %v; want %v", i, clients[hs[i].ID()], cm.IsProtected(hs[i].ID(), protectClient), served)
				}
			}
			if got := sp.Stats.Displaced.Load(); got != map[bool]uint64{true: 1}[tc.victim != 0] {
				t.Errorf("%d displaced", got)
			}
			// Client 1's 20 ms and the newcomer's claim were over the bound.
			if got := sp.Drops()[dropAttachRegret]; got != map[bool]uint64{true: 2}[bounded] {
				t.Errorf("%d regrets capped, want 2 with the bound", got)
			}
			if got := sp.Stats.Notified.Load(); got != sp.Stats.Displaced.Load() {
				t.Errorf("%d notices for %d displaced", got, sp.Stats.Displaced.Load())
			}
			if tc.victim == 0 {
				select {
				case d := <-dropped:
					t.Errorf("%s heard it was dropped by %s; nobody was", d[0], d[1])
				default:
				}
				return
			}
			// The displaced client hears of it from the superpeer, at once.
			select {
			case d := <-dropped:
				if d != [2]peer.ID{hs[tc.victim].ID(), hs[0].ID()} {
					t.Errorf("%s heard it was dropped by %s; want client %d by the superpeer", d[0], d[1], tc.victim)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the displaced client heard nothing")
			}
			if got := as[tc.victim].Stats.Heard.Load(); got != 1 {
				t.Errorf("displaced client heard %d notices, want 1", got)
			}
			if as[tc.victim].upstreamNow() != "" || hs[tc.victim].ConnManager().IsProtected(hs[0].ID(), protectUpstream) {
				t.Errorf("displaced client still names %s its superpeer (or protects the connection)", as[tc.victim].upstreamNow())
			}
			// The displaced client's renewal is a new request to a full
			// superpeer: refused, as it says less regret than anyone served.
			if ans, _ := as[tc.victim].RequestWith(ctx, hs[0].ID(), ClientRequest{Regret: tc.second}); ans.Status != Full {
				t.Errorf("displaced client's renewal: %+v, want FULL", ans)
			}
			if as[tc.victim].upstreamNow() != "" {
				t.Errorf("displaced client still names %s its superpeer", as[tc.victim].upstreamNow())
			}
		})
	}
}

func TestRegretMicros(t *testing.T) {
	for _, tc := range []struct {
		in   time.Duration
		want int32
	}{{-time.Second, -1_000_000}, {-999 * time.Nanosecond, 0}, {0, 0}, {999 * time.Nanosecond, 0}, {1500 * time.Microsecond, 1500},
		{maxRegret, math.MaxInt32}, {time.Duration(math.MaxInt64), math.MaxInt32}, {time.Duration(math.MinInt64), -math.MaxInt32}} {
		if got := regretMicros(tc.in); got != tc.want {
			t.Errorf("regretMicros(%v) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

// frame.Read tells a stream that failed (ended mid-frame, reset) from bytes
// that do not decode or a frame over the cap.
func TestReadFrame_StreamFailuresAreNotDecodeErrors(t *testing.T) {
	good, _ := proto.Marshal(&pb.AttachRequest{Leave: true})
	for _, c := range []struct {
		name   string
		r      io.Reader
		failed bool // wraps frame.ErrStreamFailed
		ok     bool
	}{
		{"a whole frame", bytes.NewReader(append([]byte{byte(len(good))}, good...)), false, true},
		{"not a protobuf", bytes.NewReader([]byte{2, 0xff, 0xff}), false, false},
		{"over the cap", bytes.NewReader([]byte{0xff, 0xff, 0x03}), false, false},
		{"cut off mid-frame", bytes.NewReader([]byte{5, 0x08}), true, false},
		{"nothing at all", bytes.NewReader(nil), true, false},
		{"reset", io.MultiReader(bytes.NewReader([]byte{5}), errReader{network.ErrReset}), true, false},
	} {
		var req pb.AttachRequest
		err := frame.Read(c.r, maxAttachFrame, &req)
		if (err == nil) != c.ok || errors.Is(err, frame.ErrStreamFailed) != c.failed {
			t.Errorf("%s: %v (stream failed %v), want ok %v, stream failed %v", c.name, err, errors.Is(err, frame.ErrStreamFailed), c.ok, c.failed)
		}
	}
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// attachWith is an Option setting the attach options a whole (tests), a
// zero Displace standing for DefaultDisplace.
func attachWith(a attachOptions) Option {
	return func(o *options) error {
		if a.Displace == 0 {
			a.Displace = DefaultDisplace
		}
		o.Attach = a
		return nil
	}
}

// prefixWith is an Option setting the options whole (tests), a zero
// Displace standing for DefaultDisplace.
func prefixWith(p options) Option {
	return func(o *options) error {
		if p.Attach.Displace == 0 {
			p.Attach.Displace = DefaultDisplace
		}
		*o = p
		return nil
	}
}

// upstreamNow is the superpeer that last accepted a as a client, "" after
// it left or was refused there.
func (a *Attach) upstreamNow() peer.ID {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.upstream
}

// Census digests: whatever decodes and passes the checks merges into a
// census without breaking it — the value held stays at least 1 and the
// size finite and not negative.
func FuzzCensusFrames(f *testing.F) {
	d, _ := proto.Marshal(&pb.CensusDigest{S: 5, Version: 2, Entries: []*pb.CensusEntry{{Id: []byte("a"), Peers: 7, Share: 0.25, Version: 2, Seq: 1}}})
	f.Add(append([]byte{byte(len(d))}, d...))
	bad, _ := proto.Marshal(&pb.CensusDigest{S: 0, Entries: []*pb.CensusEntry{{Id: nil, Peers: 0, Share: math.NaN()}}})
	f.Add(append([]byte{byte(len(bad))}, bad...))
	f.Add([]byte{0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		box, err := newCensusBox(0.1, "self", 3, 0, censusTiming{})
		if err != nil {
			t.Fatal(err)
		}
		var d pb.CensusDigest
		if decodeCensusDigest(bytesReader(b), &d) != nil {
			return
		}
		now := time.Unix(1000, 0)
		if _, err := box.merge(now, &d); err != nil {
			t.Fatalf("a checked digest did not merge: %v", err)
		}
		if v := box.value(); v.S < 1 {
			t.Fatalf("value %v after a merge", v)
		}
		box.mu.Lock()
		n, _ := box.c.Size(now)
		box.mu.Unlock()
		if math.IsNaN(n) || math.IsInf(n, 0) || n < 0 {
			t.Fatalf("size %v after a merge", n)
		}
		if out := box.digest(now); len(out.Entries) > maxCensusEntries {
			t.Fatalf("digest of %d entries", len(out.Entries))
		}
	})
}
