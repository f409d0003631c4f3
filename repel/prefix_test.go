package repel

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/protocol"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"

	"github.com/superpeer-overlay/superpeer/dht"
	"github.com/superpeer-overlay/superpeer/repel/pb"
	"github.com/superpeer-overlay/superpeer/superpeer"
	"github.com/superpeer-overlay/superpeer/vivaldi"
)

// TestWireIDs_Defaults: under the default prefix the wire speaks the IDs
// and the topic peers of earlier versions speak.
func TestWireIDs_Defaults(t *testing.T) {
	got := wireIDsUnder(dht.DefaultProtocolPrefix)
	want := wireIDs{
		move:     "/superpeer/repel/move/1.0.0",
		announce: "/superpeer/repel/announce/1.0.0",
		survey:   "/superpeer/repel/survey/1.0.0",
		topic:    "/superpeer/repel/tokens/1",
	}
	if got != want {
		t.Errorf("default wire IDs %+v, want %+v", got, want)
	}
}

// TestSelector_TwoPrefixesShareAHostAndItsPubSub: two overlays under
// different prefixes on one host, on the application's one GossipSub
// router: both selectors run (under one fixed topic the second could not
// register its validator), a move offer of one overlay is taken by its
// selector only, and closing one leaves the other's protocols and topic.
func TestSelector_TwoPrefixesShareAHostAndItsPubSub(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mn, err := mocknet.FullMeshLinked(2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mn.Close() })
	h, attacker := mn.Hosts()[0], mn.Hosts()[1]
	ps, err := pubsub.NewGossipSub(ctx, h)
	if err != nil {
		t.Fatal(err)
	}
	cfg := LocalConfig()
	cfg.Tokens = 2
	cfg.DeadAfter = time.Minute // nobody mints during the test
	sels := map[protocol.ID]*Selector{}
	vivs := map[protocol.ID]*vivaldi.Service{}
	nodes := map[protocol.ID]*dht.Node{}
	for _, prefix := range []protocol.ID{"/a", "/b"} {
		node, err := dht.New(ctx, h, dht.WithProtocolPrefix(prefix), dht.WithPubSub(ps), dht.WithRoutingTableRefresh(0))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { node.Close() })
		viv, err := vivaldi.NewService(h, vivaldi.WithInterval(0), vivaldi.WithProtocolPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { viv.Close() })
		sel, err := NewSelector(node, WithVivaldi(viv), WithConfig(cfg), WithAttach(superpeer.WithTTL(time.Minute)), WithDissemination(GossipSub))
		if err != nil {
			t.Fatalf("%s: %v", prefix, err)
		}
		t.Cleanup(func() { sel.Close() })
		if err := sel.Start(ctx); err != nil {
			t.Fatal(err)
		}
		sels[prefix], vivs[prefix], nodes[prefix] = sel, viv, node
	}
	if _, err := NewSelector(nodes["/a"], WithVivaldi(vivs["/b"]), WithConfig(cfg), WithAttach(superpeer.WithTTL(time.Minute))); err == nil || !strings.Contains(err.Error(), "WithProtocolPrefix") {
		t.Errorf("a Vivaldi service under another prefix than the node's: %v", err)
	}
	served := func(prefix protocol.ID) bool {
		ids := wireIDsUnder(prefix)
		protos := h.Mux().Protocols()
		return slices.Contains(protos, ids.move) && slices.Contains(protos, ids.survey) &&
			slices.Contains(protos, prefix+"/attach/1.0.0") && slices.Contains(ps.GetTopics(), ids.topic)
	}
	if !served("/a") || !served("/b") {
		t.Fatalf("protocols %v, topics %v: want both overlays'", h.Mux().Protocols(), ps.GetTopics())
	}

	if err := mn.ConnectAllButSelf(); err != nil {
		t.Fatal(err)
	}
	target := h.ID()
	offer := Token{ID: 0, Epoch: 100, Holder: string(target), HolderKey: PeerKey(string(target)), Coord: vivaldi.Coord{Vec: make([]float64, 8)}}
	ans := offerMove(t, attacker, target, wireIDsUnder("/b").move, offer)
	if ans.Type != pb.MoveFrame_ACK {
		t.Fatalf("answer to a /b offer: %v", &ans)
	}
	waitUntil(t, 5*time.Second, "the /b selector to hold the token", func() bool {
		tok, ok := sels["/b"].Held()
		return ok && tok.Epoch == 100
	})
	if _, ok := sels["/a"].Held(); ok || len(sels["/a"].Drops()) != 0 || len(sels["/a"].LiveTokens()) != 0 {
		t.Errorf("the /a selector saw the /b offer: holds %v, drops %v, knows %v", ok, sels["/a"].Drops(), sels["/a"].LiveTokens())
	}

	sels["/b"].Close()
	if !served("/a") {
		t.Errorf("closing /b took /a's protocols or topic: %v, %v", h.Mux().Protocols(), ps.GetTopics())
	}
	if slices.Contains(h.Mux().Protocols(), wireIDsUnder("/b").move) || slices.Contains(ps.GetTopics(), wireIDsUnder("/b").topic) {
		t.Errorf("the /b selector's protocols or topic outlived it: %v, %v", h.Mux().Protocols(), ps.GetTopics())
	}
}
