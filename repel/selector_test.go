package repel

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	lpnet "github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
	"github.com/libp2p/go-msgio/pbio"
	"google.golang.org/protobuf/proto"

	"github.com/superpeer-overlay/superpeer/dht"
	"github.com/superpeer-overlay/superpeer/repel/pb"
	"github.com/superpeer-overlay/superpeer/superpeer"
	spb "github.com/superpeer-overlay/superpeer/superpeer/pb"
	"github.com/superpeer-overlay/superpeer/vivaldi"
)

// testIDs are the wire's IDs under the tests' prefix (selectorNet's).
var testIDs = wireIDsUnder("/test")

type testPeerSet struct {
	mn    mocknet.Mocknet
	hosts []host.Host
	nodes []*dht.Node
	vivs  []*vivaldi.Service
	sels  []*Selector
}

// selectorNet builds n fully connected mocknet peers running the DHT with
// GossipSub and Vivaldi; the first withSel of them run a started Selector
// with Piggyback dissemination.
func selectorNet(t *testing.T, n, withSel int, cfg Config) *testPeerSet {
	t.Helper()
	return selectorNetWith(t, n, withSel, cfg, Piggyback)
}

// selectorNetWith is selectorNet with the selectors' dissemination d.
func selectorNetWith(t *testing.T, n, withSel int, cfg Config, d Dissemination) *testPeerSet {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	mn, err := mocknet.FullMeshLinked(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mn.Close() })
	ps := &testPeerSet{mn: mn, hosts: mn.Hosts()}
	for i, h := range ps.hosts {
		node, err := dht.New(ctx, h, dht.WithProtocolPrefix("/test"), dht.WithGossipSub())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { node.Close() })
		viv, err := vivaldi.NewService(h, vivaldi.WithInterval(20*time.Millisecond), vivaldi.WithSeed(int64(i+1)), vivaldi.WithProtocolPrefix("/test"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { viv.Close() })
		ps.nodes, ps.vivs = append(ps.nodes, node), append(ps.vivs, viv)
	}
	if err := mn.ConnectAllButSelf(); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < n; i++ {
		if err := ps.nodes[i].Join(ctx, peer.AddrInfo{ID: ps.hosts[0].ID(), Addrs: ps.hosts[0].Addrs()}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < withSel; i++ {
		sel, err := NewSelector(ps.nodes[i], WithVivaldi(ps.vivs[i]), WithConfig(cfg),
			WithAttach(superpeer.WithTTL(2*time.Second)), WithSeed(uint64(i+1)), WithDissemination(d))
		if err != nil {
			t.Fatal(err)
		}
		if err := sel.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sel.Close() })
		ps.sels = append(ps.sels, sel)
	}
	return ps
}

func waitUntil(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", limit, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSelector_SmallNetworkSettles: 8 peers, 2 tokens: both minted by the
// peers nearest their names, settled, exactly 2 superpeers, every other peer
// attached to one of them, and nothing refused between honest peers.
func TestSelector_SmallNetworkSettles(t *testing.T) {
	cfg := LocalConfig()
	cfg.Tokens = 2
	ps := selectorNet(t, 8, 8, cfg)
	waitUntil(t, 30*time.Second, "2 superpeers and every client attached", func() bool {
		sps := map[peer.ID]bool{}
		for _, s := range ps.sels {
			if s.Role() == superpeer.Superpeer {
				sps[s.node.ID()] = true
			}
		}
		if len(sps) != 2 {
			return false
		}
		for _, s := range ps.sels {
			if s.Role() == superpeer.Client && !sps[s.Superpeer()] {
				return false
			}
		}
		return true
	})
	ids := map[uint32]int{}
	for _, s := range ps.sels {
		if tok, ok := s.Held(); ok {
			ids[tok.ID]++
		}
		if d := s.Drops(); len(d) > 0 {
			t.Errorf("%s dropped messages between honest peers: %v", s.node.ID(), d)
		}
	}
	if len(ids) != 2 || ids[0] != 1 || ids[1] != 1 {
		t.Fatalf("token holders per ID: %v", ids)
	}
	// The holders measure each other and their clients (ProbeTTL), and the
	// measurements succeed.
	waitUntil(t, 10*time.Second, "the holders' probes", func() bool {
		n := 0
		for _, s := range ps.sels {
			if _, ok := s.Held(); ok {
				st := s.Stats()
				if st[statHolderProbes] > st[statProbesFailed] {
					n++
				}
			}
		}
		return n == 2
	})
}

// sendRaw opens a move stream from h to p and writes b as is.
func sendRaw(t *testing.T, h host.Host, p peer.ID, b []byte) {
	t.Helper()
	s, err := h.NewStream(context.Background(), p, testIDs.move)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = s.Write(b)
	_ = s.Close()
}

func frameBytes(t *testing.T, f *pb.MoveFrame) []byte {
	t.Helper()
	var buf bytesBuffer
	if err := pbio.NewDelimitedWriter(&buf).WriteMsg(f); err != nil {
		t.Fatal(err)
	}
	return buf.b
}

type bytesBuffer struct{ b []byte }

func (w *bytesBuffer) Write(p []byte) (int, error) { w.b = append(w.b, p...); return len(p), nil }

// TestSelector_BadMoveFramesCounted: frames that do not decode, are over the
// cap, have the wrong type or an invalid coordinate are dropped and counted
// by reason, and the peer still answers a good offer.
func TestSelector_BadMoveFramesCounted(t *testing.T) {
	cfg := LocalConfig()
	cfg.Tokens = 2
	cfg.DeadAfter = time.Minute // nobody mints during the test
	ps := selectorNet(t, 2, 1, cfg)
	victim, attacker := ps.sels[0], ps.hosts[1]
	target := ps.hosts[0].ID()
	offer := Token{ID: 0, Epoch: 100, Holder: string(target), HolderKey: PeerKey(string(target)), Coord: vivaldi.Coord{Vec: make([]float64, 8)}}

	over := binary.AppendUvarint(nil, maxMoveFrame+1)
	over = append(over, make([]byte, 64)...)
	nan := TokenToPB(offer)
	nan.Coord.Vec[0] = math.NaN()
	sendRaw(t, attacker, target, []byte{0x05, 0xff, 0xff, 0xff, 0xff, 0xff})
	sendRaw(t, attacker, target, over)
	sendRaw(t, attacker, target, frameBytes(t, &pb.MoveFrame{Type: pb.MoveFrame_ACK, Token: TokenToPB(offer)}))
	sendRaw(t, attacker, target, frameBytes(t, &pb.MoveFrame{Type: pb.MoveFrame_MOVE, Token: nan}))
	// A frame cut off by its sender closing is a stream lost, not a
	// frame that does not decode.
	sendRaw(t, attacker, target, []byte{0x05, 0x08})
	want := map[string]uint64{dropDecode: 2, dropFrameType: 1, dropCoord: 1}
	waitUntil(t, 5*time.Second, "4 bad frames and a lost stream counted", func() bool {
		d := victim.Drops()
		for k, v := range want {
			if d[k] != v {
				return false
			}
		}
		return victim.Stats()[statMoveLost] == 1
	})

	// A good offer is still taken.
	ans := offerMove(t, attacker, target, testIDs.move, offer)
	if ans.Type != pb.MoveFrame_ACK || ans.Token.Epoch != 100 {
		t.Fatalf("answer to a good offer: %v", &ans)
	}
	waitUntil(t, 5*time.Second, "the victim to hold the token", func() bool {
		tok, ok := victim.Held()
		return ok && tok.ID == 0 && tok.Epoch == 100
	})
	if d := victim.Drops(); d[dropDecode] != 2 || d[dropFrameType] != 1 || d[dropCoord] != 1 {
		t.Fatalf("drops %v", d)
	}
}

// TestSelector_GossipRefusesLiars: a peer without a selector publishes on
// the topic, signed with its own key: an announcement naming another peer
// as holder and one with an ID out of range are rejected and counted by the
// selector's validator; an honest one is taken.
func TestSelector_GossipRefusesLiars(t *testing.T) {
	cfg := LocalConfig()
	cfg.Tokens = 2
	cfg.DeadAfter = time.Minute
	ps := selectorNetWith(t, 3, 2, cfg, GossipSub)
	liar := ps.nodes[2]
	topic, err := liar.PubSub().Join(testIDs.topic)
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "the liar to see both subscribers", func() bool {
		return len(topic.ListPeers()) == 2
	})
	coord := vivaldi.Coord{Vec: make([]float64, 8)}
	other := ps.hosts[1].ID()
	publish := func(tok Token) {
		b, err := EncodeAnnounce(tok)
		if err != nil {
			t.Fatal(err)
		}
		if err := topic.Publish(context.Background(), b); err != nil {
			t.Fatal(err)
		}
	}
	me := string(liar.ID())
	publish(Token{ID: 0, Epoch: 9, Holder: string(other), HolderKey: PeerKey(string(other)), Coord: coord})
	publish(Token{ID: 7, Epoch: 9, Holder: me, HolderKey: PeerKey(me), Coord: coord})
	waitUntil(t, 10*time.Second, "both lies refused by both selectors", func() bool {
		for _, s := range ps.sels {
			d := s.Drops()
			if d[dropNotHolder] != 1 || d[dropOutOfRange] != 1 {
				return false
			}
		}
		return true
	})
	publish(Token{ID: 1, Epoch: 4, Holder: me, HolderKey: PeerKey(me), Coord: coord})
	waitUntil(t, 10*time.Second, "the honest announcement taken", func() bool {
		for _, s := range ps.sels {
			found := false
			for _, tok := range s.LiveTokens() {
				found = found || (tok.ID == 1 && tok.Holder == me)
			}
			if !found {
				return false
			}
		}
		return true
	})
}

// TestSelector_SurveysOverTheWire: with surveys on, a settled holder's
// surveys reach its candidates over testIDs.survey, they measure and
// report back, and the holder decides (keeps its place or hands the token
// on); the swarm still has one superpeer serving everyone, and nothing is
// refused between honest peers.
func TestSelector_SurveysOverTheWire(t *testing.T) {
	cfg := LocalConfig()
	cfg.Tokens = 1
	cfg.SurveyInterval = 500 * time.Millisecond
	cfg.SurveyCandidates = 3
	ps := selectorNet(t, 6, 6, cfg)
	decided := func() uint64 {
		var n uint64
		for _, s := range ps.sels {
			st := s.Stats()
			n += st[EventSurveyKept.String()] + st[EventSurveyMoved.String()]
		}
		return n
	}
	start := time.Now()
	waitUntil(t, 30*time.Second, "a survey decided", func() bool { return decided() > 0 })
	t.Logf("first survey decided after %v", time.Since(start))
	var sent, recv, reports uint64
	for _, s := range ps.sels {
		st := s.Stats()
		sent += st[statSurveySent]
		recv += st[statSurveyRecv]
		if st[EventSurvey.String()] > 0 {
			reports += st[statSurveyRecv]
		}
	}
	if sent == 0 || recv == 0 || reports == 0 {
		t.Fatalf("survey frames: %d sent, %d received, %d reports at holders", sent, recv, reports)
	}
	waitUntil(t, 30*time.Second, "one superpeer serving everyone", func() bool {
		var sp peer.ID
		n := 0
		for _, s := range ps.sels {
			if s.Role() == superpeer.Superpeer {
				sp, n = s.node.ID(), n+1
			}
		}
		if n != 1 {
			return false
		}
		for _, s := range ps.sels {
			if s.Role() == superpeer.Client && s.Superpeer() != sp {
				return false
			}
		}
		return true
	})
	for _, s := range ps.sels {
		if d := s.Drops(); len(d) > 0 {
			t.Errorf("%s dropped messages between honest peers: %v", s.node.ID(), d)
		}
	}
}

// TestSelector_BadSurveyFramesCounted: survey frames that do not decode,
// list a peer that is not a peer ID, or report an RTT out of range are
// dropped and counted by reason; a good survey is declined while its
// sender holds no token the peer knows of, then measured and answered.
func TestSelector_BadSurveyFramesCounted(t *testing.T) {
	cfg := LocalConfig()
	cfg.Tokens = 2
	cfg.DeadAfter = time.Minute           // nobody mints during the test
	cfg.SurveyInterval = 10 * time.Minute // a peer with surveys off takes none
	ps := selectorNet(t, 2, 1, cfg)
	victim, attacker := ps.sels[0], ps.hosts[1]
	target := ps.hosts[0].ID()
	send := func(b []byte) {
		s, err := attacker.NewStream(context.Background(), target, testIDs.survey)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = s.Write(b)
		_ = s.Close()
	}
	frame := func(f *pb.SurveyFrame) []byte {
		var buf bytesBuffer
		if err := pbio.NewDelimitedWriter(&buf).WriteMsg(f); err != nil {
			t.Fatal(err)
		}
		return buf.b
	}
	mine := Token{ID: 0, Epoch: 1, Holder: string(attacker.ID()), HolderKey: PeerKey(string(attacker.ID())), Coord: vivaldi.Coord{Vec: make([]float64, 8)}}
	good := EncodeSurvey(Message{Type: MsgSurvey, Token: mine, Survey: []string{string(attacker.ID())}})
	badPeer := EncodeSurvey(Message{Type: MsgSurvey, Token: mine})
	badPeer.Peers = [][]byte{[]byte("nope")}
	badRTT := EncodeSurvey(Message{Type: MsgSurveyReport, Token: mine})
	badRTT.RttUs = []int32{-5}
	send([]byte{0x05, 0xff, 0xff, 0xff, 0xff, 0xff})
	send(frame(badPeer))
	send(frame(badRTT))
	send(frame(EncodeSurvey(Message{Type: MsgSurvey, Token: mine}))) // no peers: the model refuses it
	waitUntil(t, 5*time.Second, "the bad frames counted", func() bool {
		d := victim.Drops()
		return d[dropDecode] == 1 && d[dropSurvey] == 2 && d[dropStep] == 1
	})
	// A good survey: the victim measures the attacker and reports.
	got := make(chan Message, 1)
	attacker.SetStreamHandler(testIDs.survey, func(s lpnet.Stream) {
		defer s.Close()
		var f pb.SurveyFrame
		if err := pbio.NewDelimitedReader(s, maxSurveyFrame).ReadMsg(&f); err != nil {
			return
		}
		if m, _, err := decodeSurvey(&f, target, attacker.ID()); err == nil {
			got <- m
		}
	})
	answer := func() Message {
		t.Helper()
		select {
		case m := <-got:
			return m
		case <-time.After(10 * time.Second):
			t.Fatal("no report to a survey")
		}
		return Message{}
	}
	// The attacker holds no token the victim knows of: declined, no
	// measurements bought.
	send(frame(good))
	if m := answer(); m.Type != MsgSurveyReport || len(m.RTTs) != 0 {
		t.Fatalf("report %+v, want a decline", m)
	}
	// Once it announces the token, its survey is measured and answered.
	mine.Seq = 1
	signed, err := signToken(mine, attacker.Peerstore().PrivKey(attacker.ID()))
	if err != nil {
		t.Fatal(err)
	}
	sendOn(t, attacker, target, testIDs.announce, frameOf(t, signed))
	waitUntil(t, 10*time.Second, "the announcement taken", func() bool {
		for _, tok := range victim.LiveTokens() {
			if tok.ID == 0 && tok.Holder == mine.Holder {
				return true
			}
		}
		return false
	})
	send(frame(good))
	if m := answer(); m.Type != MsgSurveyReport || len(m.RTTs) != 1 || m.RTTs[0] < 0 {
		t.Fatalf("report %+v, want the attacker's RTT measured", m)
	}
}

// frameOf is m as one varint-delimited frame.
func frameOf(t *testing.T, m proto.Message) []byte {
	t.Helper()
	var buf bytesBuffer
	if err := pbio.NewDelimitedWriter(&buf).WriteMsg(m); err != nil {
		t.Fatal(err)
	}
	return buf.b
}

// sendOn writes b on a new stream of protocol id from h to p and closes it.
func sendOn(t *testing.T, h host.Host, p peer.ID, id protocol.ID, b []byte) {
	t.Helper()
	s, err := h.NewStream(context.Background(), p, id)
	if errors.Is(err, lpnet.ErrReset) {
		// The other side took the stream and reset it at once (a rate
		// limit refuses before reading) while the negotiation's answer
		// was still on its way: refused, as the test wants to see.
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	_, _ = s.Write(b)
	_ = s.Close()
}

// liarPiggyback sends whatever it is given on the liar's Vivaldi requests.
type liarPiggyback struct {
	mu  sync.Mutex
	req []byte
}

func (l *liarPiggyback) set(b []byte) {
	l.mu.Lock()
	l.req = b
	l.mu.Unlock()
}

func (l *liarPiggyback) Request(peer.ID) []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.req
}
func (l *liarPiggyback) Reply(peer.ID, []byte) []byte { return nil }
func (l *liarPiggyback) Deliver(peer.ID, []byte)      {}

// TestSelector_PiggybackRefusesLiars: with Piggyback dissemination a peer
// refuses, and counts by reason, a direct announcement of a token that is
// not the sender's or out of range, gossip that does not decode, and a
// relayed version whose signature is not its holder's; it keeps working
// and takes an honest version, relayed or direct.
func TestSelector_PiggybackRefusesLiars(t *testing.T) {
	cfg := LocalConfig()
	cfg.Tokens = 2
	cfg.DeadAfter = time.Minute
	ps := selectorNet(t, 3, 1, cfg)
	victim, liar := ps.sels[0], ps.hosts[2]
	target := ps.hosts[0].ID()
	key := liar.Peerstore().PrivKey(liar.ID())
	coord := vivaldi.Coord{Vec: make([]float64, 8)}
	me, other := string(liar.ID()), string(ps.hosts[1].ID())
	sign := func(tok Token) *pb.SignedToken {
		st, err := signToken(tok, key)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	sendOn(t, liar, target, testIDs.announce, frameOf(t, sign(Token{ID: 0, Epoch: 9, Holder: other, HolderKey: PeerKey(other), Coord: coord, Seq: 1})))
	sendOn(t, liar, target, testIDs.announce, frameOf(t, sign(Token{ID: 7, Epoch: 9, Holder: me, HolderKey: PeerKey(me), Coord: coord, Seq: 1})))
	waitUntil(t, 5*time.Second, "both direct lies refused", func() bool {
		d := victim.Drops()
		return d[dropNotHolder] == 1 && d[dropOutOfRange] == 1
	})
	// Gossip on a Vivaldi exchange: garbage, then a version naming another
	// holder but signed by the liar.
	lp := &liarPiggyback{req: []byte{0x0a, 0xff}}
	if err := ps.vivs[2].SetPiggyback(lp); err != nil {
		t.Fatal(err)
	}
	exchange := func() {
		t.Helper()
		if _, err := ps.vivs[2].Sample(context.Background(), target); err != nil {
			t.Fatal(err)
		}
	}
	exchange()
	forged := sign(Token{ID: 0, Epoch: 9, Holder: me, HolderKey: PeerKey(me), Coord: coord, Seq: 1})
	forged.Token.Holder = []byte(ps.hosts[1].ID())
	g, err := proto.Marshal(&pb.Gossip{Tokens: []*pb.SignedToken{forged}})
	if err != nil {
		t.Fatal(err)
	}
	lp.set(g)
	exchange()
	// The liar's own sampler carries the piggyback too: each lie may come
	// more than once.
	waitUntil(t, 5*time.Second, "the bad gossip and the forged signature refused", func() bool {
		d := victim.Drops()
		return d[dropGossip] >= 1 && d[dropSignature] >= 1
	})
	for _, tok := range victim.LiveTokens() {
		if tok.Epoch == 9 {
			t.Fatalf("a lie was taken: %+v", tok)
		}
	}
	// An honest version, relayed on an exchange, is taken.
	g, err = proto.Marshal(&pb.Gossip{Tokens: []*pb.SignedToken{sign(Token{ID: 1, Epoch: 4, Holder: me, HolderKey: PeerKey(me), Coord: coord, Seq: 1})}})
	if err != nil {
		t.Fatal(err)
	}
	lp.set(g)
	exchange()
	waitUntil(t, 5*time.Second, "the honest version taken", func() bool {
		for _, tok := range victim.LiveTokens() {
			if tok.ID == 1 && tok.Holder == me && tok.Epoch == 4 {
				return true
			}
		}
		return false
	})
	if st := victim.Stats(); st[statGossipNews] != 1 {
		t.Fatalf("gossip news %d, want 1 (stats %v)", st[statGossipNews], st)
	}
}

// NewSelector refuses options that make no sense with ErrOptions, and
// leaves nothing registered: a partly filled Config (Tokens 0 is not "the
// defaults"), an attachment that would lapse between two renewals, a bad
// option; no WithConfig is DefaultConfig.
func TestNewSelector_RefusesBadOptions(t *testing.T) {
	ps := selectorNet(t, 1, 0, Config{})
	node, viv := ps.nodes[0], ps.vivs[0]
	partly := DefaultConfig()
	partly.Tokens = 0
	minute := WithAttach(superpeer.WithTTL(time.Minute))
	negativeView := func(o *selectorOptions) error { o.View = -time.Second; return nil }
	for name, o := range map[string][]Option{
		"tokens 0 in a filled config": {WithConfig(partly), minute},
		"ttl under two views":         {WithConfig(LocalConfig()), WithAttach(superpeer.WithTTL(300 * time.Millisecond))},
		"switch under 1":              {WithConfig(LocalConfig()), minute, WithSwitch(0.5)},
		"negative view":               {WithConfig(LocalConfig()), minute, negativeView},
		"a bad attach option":         {WithConfig(LocalConfig()), WithAttach(superpeer.WithCapacity(-1))},
		"an unknown dissemination":    {WithConfig(LocalConfig()), minute, WithDissemination(Dissemination(7))},
	} {
		sel, err := NewSelector(node, append(o, WithVivaldi(viv))...)
		if !errors.Is(err, ErrOptions) {
			t.Errorf("%s: %v, want ErrOptions", name, err)
		}
		if sel != nil {
			t.Errorf("%s: a selector came back with the error", name)
		}
	}
	sel, err := NewSelector(node, WithVivaldi(viv), minute)
	if err != nil {
		t.Fatalf("the zero Config: %v", err)
	}
	defer sel.Close()
	if got := sel.opts.Config; got.Tokens != DefaultConfig().Tokens || got.MoveInterval != DefaultConfig().MoveInterval {
		t.Errorf("the zero Config became %+v, want DefaultConfig", got)
	}
}

// offerMove offers tok to target on the move protocol id, as its holder
// would, and returns the answer.
func offerMove(t *testing.T, from host.Host, target peer.ID, id protocol.ID, tok Token) *pb.MoveFrame {
	t.Helper()
	s, err := from.NewStream(context.Background(), target, id)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := pbio.NewDelimitedWriter(s).WriteMsg(EncodeMove(Message{Type: MsgMove, Token: tok})); err != nil {
		t.Fatal(err)
	}
	var ans pb.MoveFrame
	if err := pbio.NewDelimitedReader(s, maxMoveFrame).ReadMsg(&ans); err != nil {
		t.Fatal(err)
	}
	return &ans
}

// A renewal that fails (the holder's attach protocol gone), not one
// refused, keeps the client with its holder while the next renewal still
// comes within the TTL; once it would not, the client goes to the other
// holder.
func TestSelector_FailedRenewalKeepsTheHolderWithinTTL(t *testing.T) {
	a, b, ps := settledPair(t)
	// Every client of a is watched: on a loaded machine one may rank b
	// first at its next step and move without a failed renewal, so the
	// test follows whichever fails first. Counts are taken from here (a
	// request that timed out under load before counts too).
	before := map[*Selector]uint64{}
	for _, s := range ps.sels {
		if s.Role() == superpeer.Client && s.Superpeer() == a.node.ID() {
			before[s] = s.Stats()["renew_failed_kept"]
		}
	}
	a.node.Host().RemoveStreamHandler("/test/attach/1.0.0")
	var client *Selector
	waitUntil(t, 10*time.Second, "a failed renewal", func() bool {
		for s, n := range before {
			if s.Stats()["renew_failed_kept"] > n {
				client = s
				return true
			}
		}
		return false
	})
	if sp := client.Superpeer(); sp != a.node.ID() {
		t.Fatalf("after one failed renewal the client is with %s, not its holder %s", sp, a.node.ID())
	}
	waitUntil(t, 10*time.Second, "the client at the other holder", func() bool { return client.Superpeer() == b.node.ID() })
	if _, ok := client.Held(); ok {
		t.Fatal("the client took a token")
	}
	if kept := client.Stats()["renew_failed_kept"] - before[client]; kept > 2 {
		t.Errorf("%d failed renewals kept with a TTL of three renewals", kept)
	}
}

// TestSelector_HearsItWasDropped: a notice on the attach protocol that the
// sender took another client in this one's place counts from the client's
// own holder only: the client is unattached at once and attaches again;
// the same notice from the other holder changes nothing.
func TestSelector_HearsItWasDropped(t *testing.T) {
	a, b, ps := settledPair(t)
	var client *Selector
	for _, s := range ps.sels {
		if s.Role() == superpeer.Client && s.Superpeer() == a.node.ID() {
			client = s
			break
		}
	}
	notice := func(from *Selector) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := from.node.Host().NewStream(ctx, client.node.ID(), "/test/attach/1.0.0")
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		if err := pbio.NewDelimitedWriter(st).WriteMsg(&spb.AttachRequest{Dropped: true}); err != nil {
			t.Fatal(err)
		}
		var resp spb.AttachResponse
		if err := pbio.NewDelimitedReader(st, 512).ReadMsg(&resp); err != nil || resp.Status != spb.AttachResponse_ACCEPTED {
			t.Fatalf("answer to the notice: %v, %v", resp.Status, err)
		}
	}
	notice(b)
	if client.Stats()["client_dropped"] != 0 || client.Attach().Drops()["stale-notice"] != 1 || client.Superpeer() != a.node.ID() {
		t.Fatalf("the other holder's notice: %d heard, %d stale, with %s; want 0, 1, its holder",
			client.Stats()["client_dropped"], client.Attach().Drops()["stale-notice"], client.Superpeer())
	}
	sent := client.Attach().Stats.Sent.Load()
	notice(a)
	if client.Stats()["client_dropped"] != 1 {
		t.Fatalf("its holder's notice: %d heard, want 1", client.Stats()["client_dropped"])
	}
	waitUntil(t, 10*time.Second, "the client attached again", func() bool {
		return client.Attach().Stats.Sent.Load() > sent && client.Superpeer() != ""
	})
}

// settledPair is 8 selectors with 2 tokens settled at holders a and b,
// every client attached to one, a the first client's. The tokens stay with
// their minters (no gain is worth a move): a token that moved to a client,
// or away from its holder, would end an attachment another way.
func settledPair(t *testing.T) (a, b *Selector, ps *testPeerSet) {
	t.Helper()
	cfg := LocalConfig()
	cfg.Tokens = 2
	cfg.MinGain, cfg.SettledMinGain = 1e9, 1e9
	ps = selectorNet(t, 8, 8, cfg)
	var holders []*Selector
	waitUntil(t, 30*time.Second, "2 settled holders, every client attached", func() bool {
		holders = holders[:0]
		for _, s := range ps.sels {
			if s.Role() == superpeer.Superpeer {
				holders = append(holders, s)
			}
		}
		if len(holders) != 2 {
			return false
		}
		for _, s := range ps.sels {
			if s.Role() == superpeer.Client && s.Superpeer() != holders[0].node.ID() && s.Superpeer() != holders[1].node.ID() {
				return false
			}
		}
		return true
	})
	a, b = holders[0], holders[1]
	for _, s := range ps.sels {
		if s.Role() == superpeer.Client {
			if s.Superpeer() == b.node.ID() {
				a, b = b, a
			}
			break
		}
	}
	return a, b, ps
}

// The client's Chooser takes Probe and Explore from the options:
// one holder explored by default, none with WithExplore(0) or less.
func TestSelector_ChooserFromOptions(t *testing.T) {
	for _, c := range []struct {
		opts                []Option
		probe, explo, first int
	}{
		{nil, 3, 1, 0},
		{[]Option{WithExplore(0)}, 3, 0, 0},
		{[]Option{WithExplore(-2)}, 3, 0, 0},
		{[]Option{WithExplore(4), WithProbe(2)}, 2, 4, 0},
		{[]Option{WithProbe(0), WithExplore(1)}, 0, 1, 0},
		{[]Option{WithExploreFirst(8)}, 3, 1, 8},
	} {
		o := selectorOptions{}
		for _, opt := range c.opts {
			if err := opt(&o); err != nil {
				t.Fatal(err)
			}
		}
		if err := o.defaults(); err != nil {
			t.Fatal(err)
		}
		ch := (&Selector{opts: o}).chooser()
		if ch.cfg.Probe != c.probe || ch.cfg.Explore != c.explo || ch.cfg.ExploreFirst != c.first {
			t.Errorf("%d options: Probe %d Explore %d ExploreFirst %d, want %d %d %d", len(c.opts), ch.cfg.Probe, ch.cfg.Explore, ch.cfg.ExploreFirst, c.probe, c.explo, c.first)
		}
	}
	if err := WithExploreFirst(-1)(&selectorOptions{}); err == nil {
		t.Error("WithExploreFirst(-1) accepted")
	}
}

// An exchange this process stalled in (vivaldi.ErrStalled) is asked again,
// up to stallRetries times, and counted; past that the error is the
// caller's.
func TestSelector_SampleRetriesStalledExchanges(t *testing.T) {
	mn, err := mocknet.FullMeshConnected(2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mn.Close() })
	hs := mn.Hosts()
	var (
		mu     sync.Mutex
		stalls int // exchanges still to call stalled
		checks int
	)
	check := func(start, end time.Time) bool {
		mu.Lock()
		defer mu.Unlock()
		checks++
		if stalls > 0 {
			stalls--
			return true
		}
		return false
	}
	viv, err := vivaldi.NewService(hs[0], vivaldi.WithInterval(0), vivaldi.WithStallCheck(check))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { viv.Close() })
	other, err := vivaldi.NewService(hs[1], vivaldi.WithInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })
	s := &Selector{viv: viv}
	ctx := context.Background()

	stalls = 2
	if _, err := s.sample(ctx, hs[1].ID()); err != nil {
		t.Fatalf("two stalls then a clear exchange: %v", err)
	}
	if got := s.Stats()[statStalledRetries]; got != 2 || checks != 3 {
		t.Fatalf("%d retries over %d exchanges, want 2 over 3", got, checks)
	}
	mu.Lock()
	stalls, checks = 100, 0
	mu.Unlock()
	if _, err := s.sample(ctx, hs[1].ID()); !errors.Is(err, vivaldi.ErrStalled) {
		t.Fatalf("always stalled: %v, want ErrStalled", err)
	}
	if checks != stallRetries+1 {
		t.Fatalf("%d exchanges, want %d", checks, stallRetries+1)
	}
}

// A peer looks a silent token's name up late enough that the news of a
// live one, seconds behind its holder, does not set it off, and early
// enough that its retry (a quarter of T_dead later) is due no later than
// the mint.
func TestSelector_LookupAfter(t *testing.T) {
	for _, cfg := range []Config{DefaultConfig(), LocalConfig(), {DeadAfter: 20 * time.Second, JoinWait: 8 * time.Second}} {
		s := &Selector{opts: selectorOptions{Config: cfg}, known: []bool{false, true}}
		if got, want := s.lookupAfter(0), cfg.joinWait()/2; got != want {
			t.Errorf("T_dead %v: a token never heard of is looked up after %v, want %v", cfg.DeadAfter, got, want)
		}
		known := s.lookupAfter(1)
		if known <= cfg.DeadAfter/2 {
			t.Errorf("T_dead %v: a known token is looked up after %v of silence, not more than half of T_dead", cfg.DeadAfter, known)
		}
		if known+cfg.DeadAfter/4 > cfg.DeadAfter {
			t.Errorf("T_dead %v: a lookup after %v and its retry a quarter of T_dead later come after the mint", cfg.DeadAfter, known)
		}
	}
}

// TestSelector_MayMint: a routing-table peer nearer a token's name keeps
// this peer from looking the name up while it is connected; once the
// connection is gone it still does for a token never heard of (a swarm's
// start: nobody has died), but not for one heard of, whose silence may be
// that peer's death. A holder nearer the name does not count.
func TestSelector_MayMint(t *testing.T) {
	ps := selectorNet(t, 2, 0, LocalConfig())
	self, other := ps.hosts[0], ps.hosts[1]
	id := uint32(0)
	for !TokenKey(id).Closer(dht.KeyOf(other.ID()), ps.nodes[0].Key()) {
		id++
	}
	s := &Selector{node: ps.nodes[0], rtNear: make([][]peer.ID, id+1), known: make([]bool, id+1)}
	s.rtNear[id] = []peer.ID{other.ID()}
	for _, c := range []struct {
		connected, heard, holder, want bool
	}{
		{true, false, false, false}, {true, true, false, false}, {true, true, true, true},
		{false, false, false, false}, {false, true, false, true}, {false, false, true, true},
	} {
		if !c.connected && self.Network().Connectedness(other.ID()) == lpnet.Connected {
			if err := ps.mn.DisconnectPeers(self.ID(), other.ID()); err != nil {
				t.Fatal(err)
			}
			waitUntil(t, 5*time.Second, "the disconnect", func() bool {
				return self.Network().Connectedness(other.ID()) != lpnet.Connected
			})
		}
		s.known[id] = c.heard
		holders := map[string]bool{string(other.ID()): c.holder}
		if got := s.mayMint(id, holders); got != c.want {
			t.Errorf("nearer peer connected %v, token heard of %v, the peer a holder %v: mayMint %v, want %v", c.connected, c.heard, c.holder, got, c.want)
		}
	}
}
