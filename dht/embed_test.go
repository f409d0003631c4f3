package dht

import (
	"context"
	"errors"
	"math/rand"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	kaddht "github.com/libp2p/go-libp2p-kad-dht"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
)

// appKad is a kad-dht as an application builds it, under its own prefix,
// with a PeerAdded callback of its own that counts.
func appKad(t *testing.T, h host.Host, prefix protocol.ID, added *atomic.Int64) *kaddht.IpfsDHT {
	t.Helper()
	kad, err := kaddht.New(h, kaddht.Mode(kaddht.ModeServer), kaddht.ProtocolPrefix(prefix), kaddht.DisableAutoRefresh())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { kad.Close() })
	if added != nil {
		rt := kad.RoutingTable()
		prev := rt.PeerAdded
		rt.PeerAdded = func(p peer.ID) { prev(p); added.Add(1) }
	}
	return kad
}

func hostProtocols(h host.Host) []protocol.ID { return h.Mux().Protocols() }

// TestNode_UseKadAndPubSub: nodes on the application's kad-dht and
// GossipSub look up (kad-dht's lookup and our raw-key one) as nodes of
// their own do; the application's routing-table callback still fires and
// the node still sees the table's changes; Close leaves the kad-dht and
// the router running.
func TestNode_UseKadAndPubSub(t *testing.T) {
	const n = 8
	mn, err := mocknet.FullMeshLinked(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	appCtx, appCancel := context.WithCancel(context.Background())
	defer appCancel()

	added := make([]atomic.Int64, n)
	kads := make([]*kaddht.IpfsDHT, n)
	pss := make([]*pubsub.PubSub, n)
	nodes := make([]*Node, n)
	for i, h := range mn.Hosts() {
		kads[i] = appKad(t, h, "/app", &added[i])
		if pss[i], err = pubsub.NewGossipSub(appCtx, h); err != nil {
			t.Fatal(err)
		}
		if nodes[i], err = New(ctx, h, WithKad(kads[i]), WithPubSub(pss[i]), WithProtocolPrefix("/app")); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nodes[i].Close() })
		if nodes[i].Kad() != kads[i] || nodes[i].PubSub() != pss[i] || nodes[i].ProtocolPrefix() != "/app" {
			t.Fatalf("node %d: Kad, PubSub or ProtocolPrefix is not what it was given", i)
		}
		if !slices.Contains(hostProtocols(h), "/app/kad/closest/1.0.0") {
			t.Fatalf("node %d serves %v, not /app/kad/closest/1.0.0", i, hostProtocols(h))
		}
	}
	events, stop := nodes[1].WatchRoutingTable()
	defer stop()

	joinAll(t, ctx, nodes)
	rng := rand.New(rand.NewSource(2))
	for i := 0; i < 12; i++ {
		var target Key
		rng.Read(target[:])
		got, err := nodes[i%n].Closest(ctx, target, 2)
		if err != nil {
			t.Fatal(err)
		}
		if want := closestNode(nodes, target).ID(); got[0] != want {
			t.Errorf("lookup %d: closest %s, want %s", i, got[0], want)
		}
	}
	if got, err := nodes[0].LookupName(ctx, "a name"); err != nil || len(got) == 0 {
		t.Errorf("LookupName: %v, %v", got, err)
	}
	for i := range added {
		if added[i].Load() == 0 {
			t.Errorf("node %d: the application's PeerAdded never fired", i)
		}
	}
	select {
	case ev := <-events:
		if !ev.Added {
			t.Errorf("first routing event %+v, want a peer added", ev)
		}
	case <-time.After(5 * routingPoll):
		t.Error("no routing event from the application's kad-dht")
	}
	if s := nodes[0].Stats(); s.ClosestSent.Load() == 0 || s.KadSent.Load() != 0 {
		t.Errorf("closest requests sent %d (want some), kad requests counted %d (want 0: kad-dht's own sender)", s.ClosestSent.Load(), s.KadSent.Load())
	}

	for _, node := range nodes {
		if err := node.Close(); err != nil {
			t.Fatal(err)
		}
	}
	for i, kad := range kads {
		if kad.Context().Err() != nil {
			t.Fatalf("kad-dht %d closed with the node", i)
		}
		if slices.Contains(hostProtocols(kad.Host()), "/app/kad/closest/1.0.0") {
			t.Errorf("node %d still serves the raw-key lookup after Close", i)
		}
	}
	if got, err := kads[0].GetClosestPeers(ctx, "after close"); err != nil || len(got) == 0 {
		t.Errorf("the application's kad-dht after Close: %v, %v", got, err)
	}
	// The routers still carry messages.
	const topic = "/app/after-close"
	t0, err := pss[0].Join(topic)
	if err != nil {
		t.Fatal(err)
	}
	t1, err := pss[1].Join(topic)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := t1.Subscribe()
	if err != nil {
		t.Fatal(err)
	}
	for !slices.Contains(t0.ListPeers(), nodes[1].ID()) {
		select {
		case <-ctx.Done():
			t.Fatal("the routers never met on the topic after Close")
		case <-time.After(20 * time.Millisecond):
		}
	}
	if err := t0.Publish(ctx, []byte("still here")); err != nil {
		t.Fatal(err)
	}
	mctx, mcancel := context.WithTimeout(ctx, 10*time.Second)
	defer mcancel()
	if m, err := sub.Next(mctx); err != nil || string(m.Data) != "still here" {
		t.Errorf("message after Close: %v, %v", m, err)
	}
}

// TestNew_RefusesInconsistentOptions: options the node would pass to the
// kad-dht it builds are refused with the application's kad-dht, as are a
// kad-dht on another host and two pubsub routers; a refused New leaves
// the application's kad-dht running.
func TestNew_RefusesInconsistentOptions(t *testing.T) {
	mn, err := mocknet.FullMeshLinked(2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mn.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h0, h1 := mn.Hosts()[0], mn.Hosts()[1]
	kad := appKad(t, h0, "/app", nil)
	ps, err := pubsub.NewGossipSub(ctx, h0)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		opts []Option
		want error
	}{
		{"WithBucketSize", []Option{WithKad(kad), WithBucketSize(10)}, ErrKadOption},
		{"Concurrency first", []Option{WithConcurrency(2), WithKad(kad)}, ErrKadOption},
		{"WithRoutingTableRefresh", []Option{WithKad(kad), WithRoutingTableRefresh(0)}, ErrKadOption},
		{"WithKadOptions", []Option{WithKad(kad), WithKadOptions(kaddht.DisableValues())}, ErrKadOption},
		{"WithReuseStreams", []Option{WithKad(kad), WithReuseStreams()}, ErrKadOption},
		{"GossipSub with WithPubSub", []Option{WithPubSub(ps), WithGossipSub()}, ErrPubSubOption},
	} {
		if _, err := New(ctx, h0, c.opts...); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if _, err := New(ctx, h1, WithKad(kad)); !errors.Is(err, ErrOtherHost) {
		t.Errorf("a kad-dht of another host: %v, want %v", err, ErrOtherHost)
	}
	if _, err := New(ctx, h0, WithKad(nil)); err == nil {
		t.Error("WithKad(nil) accepted")
	}
	if _, err := New(ctx, h0, WithPubSub(nil)); err == nil {
		t.Error("WithPubSub(nil) accepted")
	}
	if kad.Context().Err() != nil {
		t.Error("a refused New closed the application's kad-dht")
	}
	// Options of the node's own (prefix, lookups, metrics) go with it.
	node, err := New(ctx, h0, WithKad(kad), WithPubSub(ps), WithProtocolPrefix("/app"), WithLookupTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	node.Close()
}

// TestNode_DefaultProtocolIDs: without ProtocolPrefix the node speaks the
// IDs peers of earlier versions speak; with it, only IDs under the prefix.
func TestNode_DefaultProtocolIDs(t *testing.T) {
	mn, err := mocknet.FullMeshLinked(2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mn.Close() })
	ctx := context.Background()
	def, err := New(ctx, mn.Hosts()[0], WithRoutingTableRefresh(0))
	if err != nil {
		t.Fatal(err)
	}
	defer def.Close()
	if def.ProtocolPrefix() != "/superpeer" || DefaultProtocolPrefix != "/superpeer" {
		t.Errorf("default prefix %q (DefaultProtocolPrefix %q), want /superpeer", def.ProtocolPrefix(), DefaultProtocolPrefix)
	}
	for _, id := range []protocol.ID{"/superpeer/kad/1.0.0", "/superpeer/kad/closest/1.0.0"} {
		if !slices.Contains(hostProtocols(def.Host()), id) {
			t.Errorf("the default node does not speak %s: %v", id, hostProtocols(def.Host()))
		}
	}
	other, err := New(ctx, mn.Hosts()[1], WithRoutingTableRefresh(0), WithProtocolPrefix("/other"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	for _, id := range hostProtocols(other.Host()) {
		if len(id) >= 10 && id[:10] == "/superpeer" {
			t.Errorf("a node under /other speaks %s", id)
		}
	}
	for _, id := range []protocol.ID{"/other/kad/1.0.0", "/other/kad/closest/1.0.0"} {
		if !slices.Contains(hostProtocols(other.Host()), id) {
			t.Errorf("the node under /other does not speak %s", id)
		}
	}
}

// TestNode_PrefixesSeparateOverlays: two overlays under different prefixes
// on one mocknet, every host connected to every other: each node's
// routing table and lookups hold only its own overlay's peers, and its
// raw-key protocol is not served to the other's.
func TestNode_PrefixesSeparateOverlays(t *testing.T) {
	const n = 8
	mn, err := mocknet.FullMeshLinked(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	overlay := map[peer.ID]protocol.ID{}
	var a, b []*Node
	for i, h := range mn.Hosts() {
		prefix := protocol.ID("/a")
		if i%2 == 1 {
			prefix = "/b"
		}
		node, err := New(ctx, h, WithRoutingTableRefresh(0), WithProtocolPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { node.Close() })
		overlay[h.ID()] = prefix
		if prefix == "/a" {
			a = append(a, node)
		} else {
			b = append(b, node)
		}
	}
	if err := mn.ConnectAllButSelf(); err != nil {
		t.Fatal(err)
	}
	for _, nodes := range [][]*Node{a, b} {
		for _, node := range nodes[1:] {
			if err := node.Join(ctx, peer.AddrInfo{ID: nodes[0].ID(), Addrs: nodes[0].Host().Addrs()}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, node := range append(append([]*Node(nil), a...), b...) {
		for _, p := range node.RoutingTable().ListPeers() {
			if overlay[p] != node.ProtocolPrefix() {
				t.Errorf("%s node %s has %s node %s in its routing table", node.ProtocolPrefix(), node.ID(), overlay[p], p)
			}
		}
		var target Key
		got, err := node.Closest(ctx, target, len(a))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range got {
			if overlay[p] != node.ProtocolPrefix() {
				t.Errorf("a %s lookup found %s node %s", node.ProtocolPrefix(), overlay[p], p)
			}
		}
	}
	// A server counts a request once its answer is written, which may be
	// after the asker has read it: let /b's own requests all be counted.
	bServed := func() (served, sent uint64) {
		for _, n := range b {
			served += n.Stats().ClosestServed.Load()
			sent += n.Stats().ClosestSent.Load()
		}
		return served, sent
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if served, sent := bServed(); served == sent {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("/b: %d closest requests sent, %d served after 5 s", sent, served)
		}
	}
	served, _ := bServed()
	if _, err := a[0].ask(ctx, b[0].ID(), Key{}, 1); err == nil {
		t.Error("a /b node answered a /a raw-key request")
	}
	if s, _ := bServed(); s != served {
		t.Errorf("a /b node served a /a request")
	}
}
