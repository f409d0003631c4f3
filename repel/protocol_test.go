package repel

import (
	"bytes"
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	pspb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/test"
	"google.golang.org/protobuf/proto"

	"github.com/superpeer-overlay/superpeer/repel/pb"
	"github.com/superpeer-overlay/superpeer/vivaldi"
)

func testPeer(t *testing.T) peer.ID {
	t.Helper()
	p, err := test.RandPeerID()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func goodToken(holder peer.ID, client peer.ID) Token {
	return Token{
		ID: 1, Epoch: 3, Holder: string(holder), HolderKey: PeerKey(string(holder)),
		Coord:     vivaldi.Coord{Vec: []float64{0.01, 0.02}, Height: 0.001, Error: 0.3},
		HeldSince: time.Unix(0, 12345), Moves: 2,
		Digest: []Sample{{ID: string(client), Key: PeerKey(string(client)), Coord: vivaldi.Coord{Vec: []float64{0.03, 0}, Height: 0.002}, Weight: 4, RTT: 0.012}},
	}
}

func TestAnnounce_RoundTrip(t *testing.T) {
	tok := goodToken(testPeer(t), testPeer(t))
	b, err := EncodeAnnounce(tok)
	if err != nil {
		t.Fatal(err)
	}
	got, reason, err := decodeAnnounce(b)
	if err != nil {
		t.Fatalf("%s: %v", reason, err)
	}
	if got.ID != tok.ID || got.Epoch != tok.Epoch || got.Holder != tok.Holder || got.HolderKey != tok.HolderKey ||
		!got.HeldSince.Equal(tok.HeldSince) || got.Moves != tok.Moves || len(got.Digest) != 1 ||
		got.Digest[0].Key != tok.Digest[0].Key || got.Digest[0].Weight != 4 || got.Digest[0].RTT != 0.012 || got.Coord.Vec[1] != 0.02 {
		t.Fatalf("round trip: got %+v, want %+v", got, tok)
	}
}

// TestAnnounceValidator_RefusesEachBadKind runs the topic validator on
// messages whose signed author (From) and payload are chosen by the test,
// and checks each refusal is a Reject counted under its reason.
func TestAnnounceValidator_RefusesEachBadKind(t *testing.T) {
	cfg := DefaultConfig()
	author, other, client := testPeer(t), testPeer(t), testPeer(t)
	enc := func(f func(*pb.Token)) []byte {
		m := TokenToPB(goodToken(author, client))
		f(m)
		b, err := proto.Marshal(&pb.Announce{Token: m})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	cases := []struct {
		name, reason string
		from         peer.ID
		data         []byte
	}{
		{"garbage", dropDecode, author, []byte{0xff, 0xff, 0xff, 0x01}},
		{"oversized", dropDecode, author, make([]byte, maxAnnounceSize+1)},
		{"not the holder", dropNotHolder, other, enc(func(*pb.Token) {})},
		{"out of range", dropOutOfRange, author, enc(func(m *pb.Token) { m.Id = uint32(cfg.Tokens) })},
		{"NaN coordinate", dropCoord, author, enc(func(m *pb.Token) { m.Coord.Vec[0] = math.NaN() })},
		{"Inf height", dropCoord, author, enc(func(m *pb.Token) { m.Coord.Height = math.Inf(1) })},
		{"no coordinate", dropCoord, author, enc(func(m *pb.Token) { m.Coord = nil })},
		{"holder not a peer ID", dropHolder, author, enc(func(m *pb.Token) { m.Holder = []byte("nope") })},
		{"digest weight 0", dropDigest, author, enc(func(m *pb.Token) { m.Digest[0].Weight = 0 })},
		{"digest bad ID", dropDigest, author, enc(func(m *pb.Token) { m.Digest[0].Id = []byte{1, 2} })},
		{"digest NaN", dropDigest, author, enc(func(m *pb.Token) { m.Digest[0].Coord.Vec[0] = math.NaN() })},
		{"digest RTT NaN", dropDigest, author, enc(func(m *pb.Token) { m.Digest[0].Rtt = math.NaN() })},
		{"digest RTT negative", dropDigest, author, enc(func(m *pb.Token) { m.Digest[0].Rtt = -0.001 })},
		{"digest RTT over 10 s", dropDigest, author, enc(func(m *pb.Token) { m.Digest[0].Rtt = maxSampleRTT + 1 })},
		{"digest too long", dropDigest, author, enc(func(m *pb.Token) {
			for len(m.Digest) <= maxDigest {
				m.Digest = append(m.Digest, m.Digest[0])
			}
		})},
	}
	counts := map[string]int{}
	v := announceValidator(cfg, nil, func(r string) { counts[r]++ })
	want := map[string]int{}
	for _, c := range cases {
		msg := &pubsub.Message{Message: &pspb.Message{From: []byte(c.from), Data: c.data}}
		if got := v(context.Background(), c.from, msg); got != pubsub.ValidationReject {
			t.Errorf("%s: validator says %v, want reject", c.name, got)
		}
		want[c.reason]++
	}
	for r, n := range want {
		if counts[r] != n {
			t.Errorf("reason %s counted %d times, want %d (all: %v)", r, counts[r], n, counts)
		}
	}
	// The good one passes and carries the decoded token.
	msg := &pubsub.Message{Message: &pspb.Message{From: []byte(author), Data: enc(func(*pb.Token) {})}}
	if got := v(context.Background(), author, msg); got != pubsub.ValidationAccept {
		t.Fatalf("good announcement: %v", got)
	}
	if tok, ok := msg.ValidatorData.(Token); !ok || tok.Holder != string(author) {
		t.Fatalf("ValidatorData %v", msg.ValidatorData)
	}
}

func TestDecodeMove_Types(t *testing.T) {
	from, self := testPeer(t), testPeer(t)
	offer := goodToken(self, testPeer(t))
	f := EncodeMove(Message{Type: MsgMove, Token: offer})
	m, _, err := decodeMove(f, from, self, pb.MoveFrame_MOVE)
	if err != nil || m.Type != MsgMove || m.From != string(from) || m.To != string(self) {
		t.Fatalf("move: %+v %v", m, err)
	}
	if _, reason, err := decodeMove(f, from, self, pb.MoveFrame_ACK, pb.MoveFrame_REFUSE); err == nil || reason != dropFrameType {
		t.Fatalf("a MOVE where an answer is due: %q %v", reason, err)
	}
	r := EncodeMove(Message{Type: MsgMoveRefuse, Token: offer, Reason: refuseHolding})
	if m, _, err := decodeMove(r, from, self, pb.MoveFrame_ACK, pb.MoveFrame_REFUSE); err != nil || m.Reason != refuseHolding {
		t.Fatalf("refuse: %+v %v", m, err)
	}
	r.Reason = 99
	if _, reason, err := decodeMove(r, from, self, pb.MoveFrame_REFUSE); err == nil || reason != dropFrameType {
		t.Fatalf("refusal with an unknown reason: %q %v", reason, err)
	}
}

// FuzzDecodeAnnounce: the gossip decoder never panics, and what it accepts
// survives a round trip.
func FuzzDecodeAnnounce(f *testing.F) {
	p1, _ := test.RandPeerID()
	p2, _ := test.RandPeerID()
	good, _ := EncodeAnnounce(goodToken(p1, p2))
	f.Add(good)
	unmeasured := goodToken(p1, p2)
	unmeasured.Digest[0].RTT = 0
	b, _ := EncodeAnnounce(unmeasured)
	f.Add(b)
	handed := goodToken(p1, p2)
	handed.Giver, handed.GiverEpoch, handed.Cert, handed.Rival = string(p2), 6, make([]byte, 64), 90
	b, _ = EncodeAnnounce(handed)
	f.Add(b)
	f.Add([]byte{})
	f.Add([]byte{0x0a, 0x02, 0x08, 0x01})
	f.Fuzz(func(t *testing.T, data []byte) {
		tok, _, err := decodeAnnounce(data)
		if err != nil {
			return
		}
		b, err := EncodeAnnounce(tok)
		if err != nil {
			return // a digest that fits the cap only as sent
		}
		if !validDigest(tok.Digest) {
			t.Fatalf("accepted a digest the model refuses: %+v", tok.Digest)
		}
		again, _, err := decodeAnnounce(b)
		if err != nil || again.Holder != tok.Holder || again.Epoch != tok.Epoch || len(again.Digest) != len(tok.Digest) ||
			again.Giver != tok.Giver || again.GiverEpoch != tok.GiverEpoch || !bytes.Equal(again.Cert, tok.Cert) || again.Rival != tok.Rival {
			t.Fatalf("round trip of an accepted announcement: %v", err)
		}
		if (tok.Giver == "") != (len(tok.Cert) == 0) || len(tok.Cert) > maxCert {
			t.Fatalf("accepted a hand-over with giver %q and a certificate of %d bytes", tok.Giver, len(tok.Cert))
		}
		for i := range tok.Digest {
			if again.Digest[i].RTT != tok.Digest[i].RTT || again.Digest[i].Weight != tok.Digest[i].Weight {
				t.Fatalf("digest point %d changed in a round trip: %+v → %+v", i, tok.Digest[i], again.Digest[i])
			}
		}
	})
}

// FuzzMoveFrames: the move-frame reader and decoder never panic on any
// bytes, and a frame they accept names a valid holder and coordinate.
func FuzzMoveFrames(f *testing.F) {
	p1, _ := test.RandPeerID()
	p2, _ := test.RandPeerID()
	good, _ := proto.Marshal(EncodeMove(Message{Type: MsgMove, Token: goodToken(p1, p2)}))
	f.Add(good)
	f.Add([]byte{0x08, 0x03, 0x18, 0x09})
	f.Fuzz(func(t *testing.T, data []byte) {
		var fr pb.MoveFrame
		if len(data) > maxMoveFrame || proto.Unmarshal(data, &fr) != nil {
			return
		}
		m, _, err := decodeMove(&fr, p1, p2, pb.MoveFrame_MOVE, pb.MoveFrame_ACK, pb.MoveFrame_REFUSE)
		if err != nil {
			return
		}
		if _, err := peer.IDFromBytes([]byte(m.Token.Holder)); err != nil || m.Token.Coord.Check() != nil {
			t.Fatalf("accepted frame with holder %q coord %+v", m.Token.Holder, m.Token.Coord)
		}
	})
}

func TestSurveyFrames_RoundTrip(t *testing.T) {
	holder, cand, c1 := testPeer(t), testPeer(t), testPeer(t)
	tok := goodToken(holder, c1)
	tok.Surveyed = true
	sv := Message{Type: MsgSurvey, Token: tok, Survey: []string{string(holder), string(c1)}}
	f := EncodeSurvey(sv)
	if f.Token.Digest != nil {
		t.Fatal("a survey carries the holder's digest")
	}
	got, reason, err := decodeSurvey(f, holder, cand)
	if err != nil {
		t.Fatalf("%s: %v", reason, err)
	}
	if got.Type != MsgSurvey || got.From != string(holder) || got.To != string(cand) || !got.Token.sameVersion(tok) ||
		!got.Token.Surveyed || !slices.Equal(got.Survey, sv.Survey) {
		t.Fatalf("survey round trip: %+v", got)
	}
	rep := Message{Type: MsgSurveyReport, Token: tok, RTTs: []float64{0.0123456, -1, 0, maxSampleRTT}}
	got, reason, err = decodeSurvey(EncodeSurvey(rep), cand, holder)
	if err != nil {
		t.Fatalf("%s: %v", reason, err)
	}
	want := []float64{0.012346, -1, 0, maxSampleRTT}
	if got.Type != MsgSurveyReport || len(got.RTTs) != len(want) {
		t.Fatalf("report round trip: %+v", got)
	}
	for i := range want {
		if math.Abs(got.RTTs[i]-want[i]) > 1e-9 {
			t.Fatalf("report RTTs %v, want %v (whole µs)", got.RTTs, want)
		}
	}
	// A survey of a model that is not a survey frame type at all.
	bad := EncodeSurvey(sv)
	bad.Type = 7
	if _, reason, err := decodeSurvey(bad, holder, cand); err == nil || reason != dropFrameType {
		t.Fatalf("frame type 7: %q %v", reason, err)
	}
}

func TestDecodeSurvey_RefusesEachBadKind(t *testing.T) {
	holder, cand := testPeer(t), testPeer(t)
	tok := goodToken(holder, testPeer(t))
	for name, c := range map[string]struct {
		mut    func(f *pb.SurveyFrame)
		reason string
	}{
		"bad-peer":     {func(f *pb.SurveyFrame) { f.Peers = append(f.Peers, []byte("nope")) }, dropSurvey},
		"too-many":     {func(f *pb.SurveyFrame) { f.Peers = make([][]byte, maxSurveyClients+1) }, dropSurvey},
		"rtt-in-asked": {func(f *pb.SurveyFrame) { f.RttUs = []int32{5} }, dropSurvey},
		"no-token":     {func(f *pb.SurveyFrame) { f.Token = nil }, dropDecode},
		"nan-coord":    {func(f *pb.SurveyFrame) { f.Token.Coord.Vec[0] = math.NaN() }, dropCoord},
		"bad-rtt": {func(f *pb.SurveyFrame) {
			f.Type, f.Peers, f.RttUs = pb.SurveyFrame_REPORT, nil, []int32{-2}
		}, dropSurvey},
		"over-rtt": {func(f *pb.SurveyFrame) {
			f.Type, f.Peers, f.RttUs = pb.SurveyFrame_REPORT, nil, []int32{int32(maxSampleRTT*1e6) + 1}
		}, dropSurvey},
		"peers-in-report": {func(f *pb.SurveyFrame) { f.Type = pb.SurveyFrame_REPORT }, dropSurvey},
	} {
		f := EncodeSurvey(Message{Type: MsgSurvey, Token: tok, Survey: []string{string(holder)}})
		c.mut(f)
		if _, reason, err := decodeSurvey(f, holder, cand); err == nil || reason != c.reason {
			t.Errorf("%s: reason %q err %v, want %q", name, reason, err, c.reason)
		}
	}
}

// FuzzSurveyFrames: the survey decoder never panics on any bytes, and a
// frame it accepts is one the model can take or refuse by name.
func FuzzSurveyFrames(f *testing.F) {
	p1, _ := test.RandPeerID()
	p2, _ := test.RandPeerID()
	sv, _ := proto.Marshal(EncodeSurvey(Message{Type: MsgSurvey, Token: goodToken(p1, p2), Survey: []string{string(p1), string(p2)}}))
	rep, _ := proto.Marshal(EncodeSurvey(Message{Type: MsgSurveyReport, Token: goodToken(p1, p2), RTTs: []float64{0.01, -1}}))
	f.Add(sv)
	f.Add(rep)
	f.Add([]byte{0x08, 0x02, 0x22, 0x01, 0x03})
	f.Fuzz(func(t *testing.T, data []byte) {
		var fr pb.SurveyFrame
		if len(data) > maxSurveyFrame || proto.Unmarshal(data, &fr) != nil {
			return
		}
		m, _, err := decodeSurvey(&fr, p1, p2)
		if err != nil {
			return
		}
		if len(m.Survey) > maxSurveyClients || len(m.RTTs) > maxSurveyClients || m.Token.Coord.Check() != nil {
			t.Fatalf("accepted %d peers, %d RTTs, coord %+v", len(m.Survey), len(m.RTTs), m.Token.Coord)
		}
		for _, r := range m.RTTs {
			if r != -1 && (r < 0 || r > maxSampleRTT) {
				t.Fatalf("accepted RTT %v", r)
			}
		}
		cfg := DefaultConfig()
		cfg.Tokens = 2
		n, _ := NewNode(string(p2), PeerKey(string(p2)), cfg, rand.New(rand.NewPCG(1, 1)))
		// The decoder checks what any frame must be; the model refuses
		// besides what its own configuration rules out (a token or a
		// count past its Tokens, a report of more peers than it serves).
		if _, err := n.Step(time.Unix(1, 0), m); err != nil && !errors.Is(err, errBadSurvey) && !errors.Is(err, errTokenOutOfRange) && !errors.Is(err, errNotHolder) && !errors.Is(err, errInvalidCount) {
			t.Fatalf("model refused a decoded frame with %v", err)
		}
	})
}
