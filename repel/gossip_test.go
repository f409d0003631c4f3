package repel

import (
	"crypto/rand"
	"fmt"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	"github.com/superpeer-overlay/superpeer/repel/pb"
	"github.com/superpeer-overlay/superpeer/vivaldi"
)

// keyed is a fresh Ed25519 identity.
func keyed(t testing.TB) (crypto.PrivKey, string) {
	t.Helper()
	k, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return k, string(id)
}

func tokenOf(id uint32, epoch, seq uint64, holder string) Token {
	return Token{ID: id, Epoch: epoch, Seq: seq, Holder: holder, HolderKey: PeerKey(holder),
		Coord: vivaldi.Coord{Vec: []float64{0.01, 0.02}, Height: 0.001}, Issued: time.Unix(1, 0)}
}

// A signature covers every field but the digest: a changed epoch, seq,
// coordinate or holder fails, another digest does not, and a version
// signed by another key than its holder's fails.
func TestSignToken_Verify(t *testing.T) {
	k, id := keyed(t)
	tok := tokenOf(0, 3, 5, id)
	tok.Digest = []Sample{{ID: id, Key: PeerKey(id), Coord: tok.Coord, Weight: 2}}
	st, err := signToken(tok, k)
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string, st *pb.SignedToken, ok bool) {
		t.Helper()
		got, err := tokenFromPB(st.Token)
		if err != nil {
			t.Fatal(err)
		}
		if err := verifyToken(st, got, nil); (err == nil) != ok {
			t.Fatalf("%s: verify says %v", what, err)
		}
	}
	check("as signed", st, true)
	change := func(f func(*pb.Token)) *pb.SignedToken {
		c := proto.Clone(st).(*pb.SignedToken)
		f(c.Token)
		return c
	}
	check("another digest", change(func(m *pb.Token) { m.Digest = nil }), true)
	check("another epoch", change(func(m *pb.Token) { m.Epoch++ }), false)
	check("another seq", change(func(m *pb.Token) { m.Seq++ }), false)
	check("another coordinate", change(func(m *pb.Token) { m.Coord.Vec[0] += 0.001 }), false)
	_, other := keyed(t)
	check("another holder", change(func(m *pb.Token) { m.Holder = []byte(other) }), false)
	k2, _ := keyed(t)
	st2, err := signToken(tok, k2)
	if err != nil {
		t.Fatal(err)
	}
	check("signed by another key", st2, false)
}

// The table keeps the freshest version of each token (a later epoch, or
// the same version with a higher Seq), pushes each news GossipPush times on
// requests, and a reply carries exactly what the request's known lacks.
func TestGossipTable_PushPull(t *testing.T) {
	k, id := keyed(t)
	sign := func(tok Token) *pb.SignedToken {
		st, err := signToken(tok, k)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	a := newGossipTable(3, 2)
	t0 := tokenOf(0, 1, 1, id)
	t1 := tokenOf(1, 4, 7, id)
	if !a.offer(t0, sign(t0)) || !a.offer(t1, sign(t1)) {
		t.Fatal("news refused")
	}
	if old := tokenOf(0, 1, 1, id); a.offer(old, sign(old)) {
		t.Fatal("a copy of a known heartbeat taken as news")
	}
	decode := func(b []byte) ([]*pb.Version, []signedToken) {
		t.Helper()
		known, toks, reason, err := decodeGossip(b, 3)
		if err != nil {
			t.Fatalf("own gossip refused: %s %v", reason, err)
		}
		return known, toks
	}
	for i := 0; i < 2; i++ {
		if known, toks := decode(a.request()); len(known) != 2 || len(toks) != 2 {
			t.Fatalf("request %d: %d known, %d pushed; want 2 and 2", i, len(known), len(toks))
		}
	}
	if known, toks := decode(a.request()); len(known) != 2 || len(toks) != 0 {
		t.Fatalf("third request pushed %d (known %d); GossipPush is 2", len(toks), len(known))
	}
	// b knows token 0 at Seq 1 and token 1 at an older epoch; a has a newer
	// heartbeat of 0 by now, and b knows token 2, which a does not.
	t0b := tokenOf(0, 1, 2, id)
	a.offer(t0b, sign(t0b))
	b := newGossipTable(3, 0)
	for _, tok := range []Token{tokenOf(0, 1, 1, id), tokenOf(1, 3, 9, id), tokenOf(2, 1, 1, id)} {
		b.offer(tok, sign(tok))
	}
	bKnown, _ := decode(b.request())
	_, toks := decode(a.reply(bKnown))
	if len(toks) != 2 || toks[0].tok.ID != 0 || toks[0].tok.Seq != 2 || toks[1].tok.ID != 1 || toks[1].tok.Epoch != 4 {
		t.Fatalf("reply carried %+v; want token 0 at Seq 2 and token 1 at epoch 4", toks)
	}
	aKnown, _ := decode(a.request())
	if _, toks := decode(b.reply(aKnown)); len(toks) != 1 || toks[0].tok.ID != 2 {
		t.Fatalf("b's reply to a carried %+v; want token 2 only", toks)
	}
	if got := a.reply(nil); got == nil {
		t.Fatal("a reply to a peer that knows nothing is empty")
	}
	if got := newGossipTable(3, 1).request(); got != nil {
		t.Fatalf("an empty table's request carries %d bytes", len(got))
	}
}

// DecodeGossip refuses, naming the reason, what a peer must not take.
func TestDecodeGossip_Refuses(t *testing.T) {
	k, id := keyed(t)
	good := tokenOf(0, 1, 1, id)
	st, err := signToken(good, k)
	if err != nil {
		t.Fatal(err)
	}
	withDigest := good
	withDigest.Digest = []Sample{{ID: id, Key: PeerKey(id), Coord: good.Coord, Weight: 1}}
	stDigest, err := signToken(withDigest, k)
	if err != nil {
		t.Fatal(err)
	}
	out := tokenOf(5, 1, 1, id)
	stOut, err := signToken(out, k)
	if err != nil {
		t.Fatal(err)
	}
	enc := func(g *pb.Gossip) []byte {
		b, err := proto.Marshal(g)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, c := range []struct {
		name   string
		b      []byte
		reason string
	}{
		{"not protobuf", []byte{0x0a, 0xff}, dropGossip},
		{"oversize", make([]byte, vivaldi.MaxPiggyback+1), dropGossip},
		{"too many known", enc(&pb.Gossip{Known: make([]*pb.Version, 3)}), dropGossip},
		{"known out of range", enc(&pb.Gossip{Known: []*pb.Version{{Id: 2}}}), dropGossip},
		{"token out of range", enc(&pb.Gossip{Tokens: []*pb.SignedToken{stOut}}), dropOutOfRange},
		{"token with a digest", enc(&pb.Gossip{Tokens: []*pb.SignedToken{stDigest}}), dropGossip},
		{"bad holder", enc(&pb.Gossip{Tokens: []*pb.SignedToken{{Token: &pb.Token{Holder: []byte("x"), Coord: &pb.Coord{Vec: []float64{1}}}}}}), dropHolder},
	} {
		if _, _, reason, err := decodeGossip(c.b, 2); err == nil || reason != c.reason {
			t.Errorf("%s: reason %q, err %v; want %q", c.name, reason, err, c.reason)
		}
	}
	if _, toks, _, err := decodeGossip(enc(&pb.Gossip{Tokens: []*pb.SignedToken{st}}), 2); err != nil || len(toks) != 1 {
		t.Fatalf("a good frame refused: %v", err)
	}
}

func FuzzGossipFrames(f *testing.F) {
	k, id := keyed(f)
	tab := newGossipTable(4, 1)
	for i := uint32(0); i < 3; i++ {
		tok := tokenOf(i, uint64(i)+1, 2, id)
		st, _ := signToken(tok, k)
		tab.offer(tok, st)
	}
	f.Add(tab.request())
	f.Add(tab.reply(nil))
	f.Add([]byte{})
	f.Add([]byte{0x0a, 0x02, 0x08, 0x01})
	f.Fuzz(func(t *testing.T, data []byte) {
		known, toks, _, err := decodeGossip(data, 4)
		if err != nil {
			return
		}
		if len(known) > 4 || len(toks) > 4 {
			t.Fatalf("accepted %d known and %d tokens for 4", len(known), len(toks))
		}
		for _, g := range toks {
			if g.tok.ID >= 4 || len(g.tok.Digest) > 0 || !validCoord(g.tok.Coord) {
				t.Fatalf("accepted token %+v", g.tok)
			}
			// Verifying never panics, whatever the signature.
			_ = verifyToken(g.pb, g.tok, nil)
		}
		// A reply to what was said to be known decodes again.
		if _, _, _, err := decodeGossip(tab.reply(known), 4); err != nil {
			t.Fatalf("reply to an accepted request refused: %v", err)
		}
	})
}

// A verified version's key covers what its signature covers: another
// digest keeps the key, another seq or signature changes it; the memory
// keeps the last Limit keys, and no two splits of the signed bytes and
// the signature share a key.
func TestVerifiedSigs(t *testing.T) {
	k, id := keyed(t)
	tok := tokenOf(0, 3, 5, id)
	st, err := signToken(tok, k)
	if err != nil {
		t.Fatal(err)
	}
	key := func(st *pb.SignedToken) verKey {
		t.Helper()
		s, err := sigKey(st)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	k0 := key(st)
	c := proto.Clone(st).(*pb.SignedToken)
	c.Token.Digest = []*pb.Sample{{Id: []byte(id), Weight: 1}}
	if key(c) != k0 {
		t.Error("another digest (not signed) changed the key")
	}
	c = proto.Clone(st).(*pb.SignedToken)
	c.Token.Seq++
	if key(c) == k0 {
		t.Error("another seq kept the key")
	}
	k2, _ := keyed(t)
	st2, err := signToken(tok, k2)
	if err != nil {
		t.Fatal(err)
	}
	if key(st2) == k0 {
		t.Error("another signature kept the key")
	}

	if lpKey([]byte("ab"), []byte("c")) == lpKey([]byte("a"), []byte("bc")) {
		t.Error("two splits of the same bytes share a key")
	}

	v := verifiedSigs{Limit: 20}
	if v.has(k0) {
		t.Fatal("an empty memory has a key")
	}
	v.add(k0)
	if !v.has(k0) || v.has(key(st2)) {
		t.Fatal("the memory lost its key or has one never added")
	}
	n := func(i int) verKey { return lpKey([]byte(fmt.Sprint(i)), nil) }
	for i := range v.Limit {
		v.add(n(i))
	}
	if v.has(k0) || !v.has(n(1)) || !v.has(n(v.Limit-1)) || len(v.keys) != v.Limit || len(v.order) != v.Limit {
		t.Fatalf("after %d more keys: first kept %v, %d keys", v.Limit, v.has(k0), len(v.keys))
	}
	v.add(n(3)) // known: no change
	if !v.has(n(0)) || len(v.keys) != v.Limit {
		t.Fatal("adding a key held again forgot one")
	}
	var d verifiedSigs
	for i := range defaultVerifiedSigs + 1 {
		d.add(n(i))
	}
	if d.has(n(0)) || !d.has(n(defaultVerifiedSigs)) || len(d.keys) != defaultVerifiedSigs {
		t.Fatalf("without a Limit: %d keys, first kept %v", len(d.keys), d.has(n(0)))
	}
}
