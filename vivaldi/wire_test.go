package vivaldi

import (
	"bytes"
	"errors"
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
	"google.golang.org/protobuf/proto"

	"github.com/superpeer-overlay/superpeer/vivaldi/pb"
)

// frame encodes m as one length-prefixed frame.
func frame(m proto.Message) []byte {
	b, _ := proto.Marshal(m)
	return append(uvarint(uint64(len(b))), b...)
}

func uvarint(x uint64) []byte {
	var out []byte
	for x >= 0x80 {
		out = append(out, byte(x)|0x80)
		x >>= 7
	}
	return append(out, byte(x))
}

func pbCoord(vec []float64, h, e float64) *pb.Message {
	return &pb.Message{Coord: &pb.Coordinate{Vec: vec, Height: h, Error: e}}
}

// badFrames are frames the decoder must refuse for dims = 3, by reason.
func badFrames() map[string][]byte {
	return map[string][]byte{
		dropOversize:   append(uvarint(maxFrameSize+1), make([]byte, 16)...),
		dropDecode:     append(uvarint(5), 0xff, 0xff, 0xff, 0xff, 0xff),
		dropNoCoord:    frame(&pb.Message{}),
		dropNonFinite:  frame(pbCoord([]float64{0, math.NaN(), 0}, 0, 1)),
		dropOutOfRange: frame(pbCoord([]float64{0, 0, 0}, -1, 1)),
		dropDimensions: frame(pbCoord([]float64{0, 0}, 0, 1)),
	}
}

func TestDecodeCoord_Refuses(t *testing.T) {
	for reason, b := range badFrames() {
		_, err := decodeCoord(b, 3)
		var fe *frameError
		if !errors.As(err, &fe) || fe.Reason != reason {
			t.Errorf("%s: err = %v, want FrameError %q", reason, err, reason)
		}
	}
	// Truncated: the prefix promises more than arrives.
	if _, err := decodeCoord(append(uvarint(10), 1, 2), 3); err == nil {
		t.Error("truncated frame accepted")
	}
}

func TestDecodeCoord_RoundTrip(t *testing.T) {
	c := Coord{Vec: []float64{0.01, -0.02, 0.03}, Height: 0.004, Error: 0.3}
	got, err := decodeCoord(encodeCoord(c), 3)
	if err != nil {
		t.Fatal(err)
	}
	if got.DistanceTo(c) != c.Height*2 || got.Error != c.Error {
		t.Fatalf("round trip gave %v, want %v", got, c)
	}
}

// FuzzDecodeCoord feeds arbitrary frames to the decoder: it must refuse
// with a FrameError or return a valid coordinate and, of the neighbour
// entries, at most maxNeighbors valid ones, with every other entry counted;
// whatever it accepts survives a round trip unchanged.
func FuzzDecodeCoord(f *testing.F) {
	f.Add(encodeCoord(Coord{Vec: []float64{0.01, 0.02, 0.03}, Height: 0.001, Error: 0.5}))
	f.Add(encodeCoord(Coord{Vec: []float64{0, 0, 0}}))
	for _, b := range badFrames() {
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add(uvarint(1 << 62))
	good := []float64{0.01, 0.02, 0.03}
	addr := ma.StringCast("/ip4/1.2.3.4/udp/4001/quic-v1").Bytes()
	with := pbCoord(good, 0.001, 0.5)
	with.WantNeighbors = 4
	for i := 0; i < 3; i++ {
		with.Neighbors = append(with.Neighbors, pbNeighbor(testID(f, i), 0.001, good, addr))
	}
	f.Add(frame(with))
	for _, e := range badNeighbors(f) {
		m := pbCoord(good, 0.001, 0.5)
		m.Neighbors = []*pb.Neighbor{pbNeighbor(testID(f, 1), 0.002, good), e}
		f.Add(frame(m))
	}
	const maxN = 2
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := decodeCoord(b, 3)
		fr, ferr := decodeMessage(b, 3, maxN)
		if (err == nil) != (ferr == nil) {
			t.Fatalf("DecodeCoord %v but DecodeMessage %v", err, ferr)
		}
		if err != nil {
			var fe *frameError
			if !errors.As(err, &fe) || !errors.As(ferr, &fe) {
				t.Fatalf("error %v / %v is not a FrameError", err, ferr)
			}
			return
		}
		if c.Check() != nil || len(c.Vec) != 3 {
			t.Fatalf("accepted invalid coordinate %v", c)
		}
		// An accepted coordinate survives a round trip unchanged.
		again, err := decodeCoord(encodeCoord(c), 3)
		if err != nil || again.Height != c.Height || again.Error != c.Error || again.DistanceTo(c) != 2*c.Height {
			t.Fatalf("round trip of %v gave %v, %v", c, again, err)
		}
		// Neighbours: at most maxN, each valid and distinct; the rest
		// counted; the accepted ones survive a round trip.
		if fr.Want < 0 || fr.Want > maxShare || len(fr.Neighbors) > maxN {
			t.Fatalf("want %d, %d neighbours", fr.Want, len(fr.Neighbors))
		}
		seen := map[peer.ID]bool{}
		for _, n := range fr.Neighbors {
			if seen[n.ID] || n.ID.Validate() != nil || len(n.ID) > maxPeerIDSize || n.Coord.Check() != nil || len(n.Coord.Vec) != 3 ||
				!(n.RTT >= 0 && n.RTT <= MaxRTT.Seconds()) || len(n.Addrs) > maxNeighborAddrs {
				t.Fatalf("accepted bad neighbour %+v", n)
			}
			seen[n.ID] = true
		}
		for reason, k := range fr.Refused {
			if k <= 0 || !strings.HasPrefix(reason, "neighbor_") {
				t.Fatalf("refused %v", fr.Refused)
			}
		}
		back, err := decodeMessage(encodeMessage(fr), 3, maxN)
		if err != nil || back.Want != fr.Want || len(back.Neighbors) != len(fr.Neighbors) || back.Refused != nil {
			t.Fatalf("round trip of %v gave %v, %v", fr, back, err)
		}
		for i, n := range back.Neighbors {
			if n.ID != fr.Neighbors[i].ID || n.RTT != fr.Neighbors[i].RTT || len(n.Addrs) != len(fr.Neighbors[i].Addrs) {
				t.Fatalf("neighbour %d: %+v became %+v", i, fr.Neighbors[i], n)
			}
		}
	})
}

// testID is a deterministic peer ID.
func testID(t testing.TB, i int) peer.ID {
	t.Helper()
	_, pub, err := crypto.GenerateEd25519Key(rand.New(rand.NewSource(int64(i) + 1)))
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func pbNeighbor(id peer.ID, rtt float64, vec []float64, addrs ...[]byte) *pb.Neighbor {
	e := &pb.Neighbor{Id: []byte(id), Rtt: rtt, Addrs: addrs}
	if vec != nil {
		e.Coord = &pb.Coordinate{Vec: vec, Height: 0.001, Error: 0.5}
	}
	return e
}

// badNeighbors are neighbour entries the decoder must refuse for dims = 3,
// by reason.
func badNeighbors(t testing.TB) map[string]*pb.Neighbor {
	id := testID(t, 100)
	good := []float64{0.01, 0.02, 0.03}
	addr := ma.StringCast("/ip4/1.2.3.4/udp/4001/quic-v1").Bytes()
	return map[string]*pb.Neighbor{
		dropNeighborID + "/empty":       pbNeighbor("", 0.01, good),
		dropNeighborID + "/garbage":     {Id: []byte{0xff, 0xff, 0x01}, Coord: &pb.Coordinate{Vec: good}},
		dropNeighborID + "/long":        {Id: make([]byte, maxPeerIDSize+1), Coord: &pb.Coordinate{Vec: good}},
		dropNeighborCoord + "/missing":  pbNeighbor(id, 0.01, nil),
		dropNeighborCoord + "/nan":      pbNeighbor(id, 0.01, []float64{0, math.NaN(), 0}),
		dropNeighborCoord + "/dims":     pbNeighbor(id, 0.01, []float64{0, 0}),
		dropNeighborRTT + "/nan":        pbNeighbor(id, math.NaN(), good),
		dropNeighborRTT + "/negative":   pbNeighbor(id, -0.001, good),
		dropNeighborRTT + "/too long":   pbNeighbor(id, 11, good),
		dropNeighborAddr + "/too many":  pbNeighbor(id, 0.01, good, addr, addr, addr),
		dropNeighborAddr + "/garbage":   pbNeighbor(id, 0.01, good, []byte{0xff, 0xff, 0xff}),
		dropNeighborAddr + "/too long":  pbNeighbor(id, 0.01, good, make([]byte, maxAddrSize+1)),
		dropNeighborAddr + "/empty":     pbNeighbor(id, 0.01, good, []byte{}),
		dropNeighborCoord + "/infinite": pbNeighbor(id, 0.01, []float64{0, math.Inf(1), 0}),
	}
}

func TestDecodeMessage_Neighbors(t *testing.T) {
	good := []float64{0.01, 0.02, 0.03}
	addr := ma.StringCast("/ip4/1.2.3.4/udp/4001/quic-v1")
	for name, e := range badNeighbors(t) {
		reason, _, _ := strings.Cut(name, "/")
		m := pbCoord(good, 0, 1)
		m.Neighbors = []*pb.Neighbor{pbNeighbor(testID(t, 1), 0.002, good, addr.Bytes()), e}
		f, err := decodeMessage(frame(m), 3, 4)
		if err != nil {
			t.Fatalf("%s: one bad entry refused the frame: %v", name, err)
		}
		if len(f.Neighbors) != 1 || f.Neighbors[0].ID != testID(t, 1) || f.Refused[reason] != 1 || len(f.Refused) != 1 {
			t.Errorf("%s: kept %d, refused %v, want 1 kept and one %s", name, len(f.Neighbors), f.Refused, reason)
		}
	}
	// Repeats and entries beyond maxNeighbors are refused too.
	m := pbCoord(good, 0, 1)
	for i := 0; i < 5; i++ {
		m.Neighbors = append(m.Neighbors, pbNeighbor(testID(t, i), 0.001*float64(i), good))
	}
	m.Neighbors = append(m.Neighbors[:2], append([]*pb.Neighbor{pbNeighbor(testID(t, 0), 0, good)}, m.Neighbors[2:]...)...)
	f, err := decodeMessage(frame(m), 3, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Neighbors) != 3 || f.Refused[dropNeighborDup] != 1 || f.Refused[dropNeighborExcess] != 2 {
		t.Fatalf("kept %d, refused %v; want 3 kept, 1 dup, 2 excess", len(f.Neighbors), f.Refused)
	}
	// A request asks for at most maxShare.
	m = pbCoord(good, 0, 1)
	m.WantNeighbors = 1 << 30
	if f, err := decodeMessage(frame(m), 3, 0); err != nil || f.Want != maxShare {
		t.Fatalf("want %d, %v", f.Want, err)
	}
	// A bad coordinate still refuses the whole frame, neighbours or not.
	m = pbCoord([]float64{0, math.NaN(), 0}, 0, 1)
	m.Neighbors = []*pb.Neighbor{pbNeighbor(testID(t, 1), 0.002, good)}
	var fe *frameError
	if _, err := decodeMessage(frame(m), 3, 4); !errors.As(err, &fe) || fe.Reason != dropNonFinite {
		t.Fatalf("err %v", err)
	}
}

func TestEncodeMessage_RoundTrip(t *testing.T) {
	addr := ma.StringCast("/ip4/1.2.3.4/udp/4001/quic-v1")
	in := wireFrame{Coord: Coord{Vec: []float64{0.01, 0.02, 0.03}, Height: 0.001, Error: 0.4}, Want: 3}
	for i := 0; i < 3; i++ {
		in.Neighbors = append(in.Neighbors, neighbor{
			ID: testID(t, i), RTT: 0.001 * float64(i+1),
			Coord: Coord{Vec: []float64{float64(i), 0, 0}, Height: 0.002, Error: 0.3},
			Addrs: []ma.Multiaddr{addr},
		})
	}
	out, err := decodeMessage(encodeMessage(in), 3, maxShare)
	if err != nil {
		t.Fatal(err)
	}
	if out.Want != 3 || len(out.Neighbors) != 3 || out.Refused != nil {
		t.Fatalf("decoded %v", out)
	}
	for i, n := range out.Neighbors {
		w := in.Neighbors[i]
		if n.ID != w.ID || n.RTT != w.RTT || n.Coord.DistanceTo(w.Coord) != 2*w.Coord.Height || len(n.Addrs) != 1 || !n.Addrs[0].Equal(addr) {
			t.Fatalf("neighbour %d: %+v, want %+v", i, n, w)
		}
	}
}

// A reply never exceeds MaxMessageSize: neighbours that would not fit are
// left out (here, 8 neighbours of 32 dimensions).
func TestEncodeMessage_FitsMaxMessageSize(t *testing.T) {
	vec := make([]float64, maxDimensions)
	for i := range vec {
		vec[i] = 0.001 * float64(i+1)
	}
	addr := ma.StringCast("/ip6/2001:db8::1/udp/4001/quic-v1")
	in := wireFrame{Coord: Coord{Vec: vec, Height: 0.001, Error: 0.4}}
	for i := 0; i < maxShare; i++ {
		in.Neighbors = append(in.Neighbors, neighbor{ID: testID(t, i), RTT: 0.01, Coord: in.Coord, Addrs: []ma.Multiaddr{addr, addr, addr}})
	}
	b := encodeMessage(in)
	out, err := decodeMessage(b, maxDimensions, maxShare)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Neighbors) == 0 || len(out.Neighbors) == maxShare || out.Refused != nil {
		t.Fatalf("%d bytes, %d neighbours, refused %v: want some but not all", len(b), len(out.Neighbors), out.Refused)
	}
	for _, n := range out.Neighbors {
		if len(n.Addrs) != maxNeighborAddrs {
			t.Fatalf("%d addresses sent, want %d", len(n.Addrs), maxNeighborAddrs)
		}
	}
	// Four neighbours of the default 8 dimensions, each with two addresses,
	// fit (what a Service sends by default).
	in = wireFrame{Coord: newCoord(8, 0.001, 0.4)}
	for i := 0; i < DefaultNearConfig().Share; i++ {
		in.Neighbors = append(in.Neighbors, neighbor{ID: testID(t, i), RTT: 0.01, Coord: newCoord(8, 0.001, 0.4), Addrs: []ma.Multiaddr{addr, addr}})
	}
	b = encodeMessage(in)
	if out, err := decodeMessage(b, 8, maxShare); err != nil || len(out.Neighbors) != len(in.Neighbors) {
		t.Fatalf("default reply of %d bytes: %d neighbours, %v", len(b), len(out.Neighbors), err)
	}
	t.Logf("a default reply with %d neighbours: %d bytes", len(in.Neighbors), len(b))
}

// Peers that predate neighbour gossip: their request (no want_neighbors)
// decodes as asking for none, and the reply to it is byte for byte the one
// they always got; readCoord, as they read, takes a new reply's coordinate.
func TestWire_BackwardCompatible(t *testing.T) {
	c := Coord{Vec: []float64{0.01, -0.02, 0.03}, Height: 0.004, Error: 0.3}
	old := encodeCoord(c)
	f, err := decodeMessage(old, 3, maxShare)
	if err != nil || f.Want != 0 || len(f.Neighbors) != 0 {
		t.Fatalf("old request: %v, %v", f, err)
	}
	if !bytes.Equal(encodeMessage(wireFrame{Coord: c}), old) {
		t.Fatal("a reply without neighbours differs from the old format")
	}
	m := pbCoord(c.Vec, c.Height, c.Error)
	m.Neighbors = []*pb.Neighbor{pbNeighbor(testID(t, 1), 0.002, c.Vec)}
	got, err := decodeCoord(frame(m), 3)
	if err != nil || got.Height != c.Height {
		t.Fatalf("readCoord of a reply with neighbours: %v, %v", got, err)
	}
}
