package dht

import (
	"bytes"
	"context"
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	kaddht "github.com/libp2p/go-libp2p-kad-dht"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
	"github.com/libp2p/go-msgio/pbio"
	"google.golang.org/protobuf/proto"

	"github.com/superpeer-overlay/superpeer/dht/pb"
)

// testNetwork builds n nodes on a fully linked mocknet and joins them in a chain
// of random earlier peers.
func testNetwork(t *testing.T, n int, opts ...Option) []*Node {
	t.Helper()
	mn, err := mocknet.FullMeshLinked(n)
	if err != nil {
		t.Fatal(err)
	}
	return testNetworkOn(t, mn, opts...)
}

// testNetworkOn is testNetwork on the linked hosts of mn.
func testNetworkOn(t *testing.T, mn mocknet.Mocknet, opts ...Option) []*Node {
	t.Helper()
	t.Cleanup(func() { mn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	var nodes []*Node
	for _, h := range mn.Hosts() {
		node, err := New(ctx, h, append([]Option{WithRoutingTableRefresh(0)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { node.Close() })
		nodes = append(nodes, node)
	}
	joinAll(t, ctx, nodes)
	return nodes
}

func closestNode(nodes []*Node, target Key) *Node {
	best := nodes[0]
	for _, n := range nodes[1:] {
		if target.Closer(n.Key(), best.Key()) {
			best = n
		}
	}
	return best
}

func TestNode_ClosestFindsTheTrueClosestPeer(t *testing.T) {
	nodes := testNetwork(t, 40)
	rng := rand.New(rand.NewSource(2))
	ctx := context.Background()
	for i := 0; i < 40; i++ {
		var target Key
		rng.Read(target[:])
		from := nodes[rng.Intn(len(nodes))]
		got, err := from.Closest(ctx, target, 3)
		if err != nil {
			t.Fatal(err)
		}
		if want := closestNode(nodes, target).ID(); got[0] != want {
			t.Errorf("lookup %d: closest %s, want %s", i, got[0], want)
		}
		for j := 1; j < len(got); j++ {
			if target.Closer(KeyOf(got[j]), KeyOf(got[j-1])) {
				t.Errorf("lookup %d: answer not sorted by distance", i)
			}
		}
		// ClosestWhere answers as if the peers keep refuses were not
		// there: refuse the two true closest, and the third is first.
		refused := map[peer.ID]bool{got[0]: true, got[1]: true}
		rest := slices.DeleteFunc(slices.Clone(nodes), func(n *Node) bool { return refused[n.ID()] })
		kept, err := from.ClosestWhere(ctx, target, 2, func(p peer.ID) bool { return !refused[p] })
		if err != nil {
			t.Fatal(err)
		}
		if want := closestNode(rest, target).ID(); kept[0] != want || refused[kept[1]] {
			t.Errorf("lookup %d: ClosestWhere %v, want %s first and no refused peer", i, kept, want)
		}
	}
	// A node refused by keep is not its own answer.
	self := nodes[4]
	if got, err := self.ClosestWhere(ctx, self.Key(), 1, func(p peer.ID) bool { return p != self.ID() }); err != nil || got[0] == self.ID() {
		t.Errorf("ClosestWhere(own key, not itself) = %v, %v", got, err)
	}
	// A node's own key: it is its own closest peer.
	if got, err := nodes[5].Closest(ctx, nodes[5].Key(), 1); err != nil || got[0] != nodes[5].ID() {
		t.Errorf("Closest(own key) = %v, %v; want the node itself", got, err)
	}
	if _, err := nodes[0].Closest(ctx, Key{}, 0); err == nil {
		t.Error("Closest with count 0 succeeded")
	}
}

func TestNode_LookupNameUsesKadDHT(t *testing.T) {
	nodes := testNetwork(t, 30)
	ctx := context.Background()
	for i := 0; i < 10; i++ {
		name := fmt.Sprintf("name-%d", i)
		from := nodes[i]
		got, err := from.LookupName(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		others := make([]*Node, 0, len(nodes)-1)
		for _, n := range nodes {
			if n != from {
				others = append(others, n)
			}
		}
		if want := closestNode(others, KeyOfName(name)).ID(); len(got) == 0 || got[0] != want {
			t.Errorf("%s: got %v first, want %s", name, got, want)
		}
	}
	if nodes[0].Stats().KadSent.Load() == 0 {
		t.Error("kad requests are not counted")
	}
}

// A peer that takes a kad-dht request and never answers costs a lookup one
// request's timeout (half the lookup's), not the lookup: kad-dht,
// told the request failed, goes on with the other peers. Before requests
// had their own timeout, the silent peer held the lookup to its deadline
// and it failed.
func TestNode_LookupNameGoesOnPastASilentPeer(t *testing.T) {
	const lookup = 4 * time.Second
	nodes := testNetwork(t, 20, WithLookupTimeout(lookup))
	from := nodes[0]
	others := nodes[1:]
	// A name whose closest peer (but from) is in from's table, so that
	// from's lookup asks it among the first.
	var name string
	var silent *Node
	for i := 0; silent == nil; i++ {
		name = fmt.Sprintf("silent-%d", i)
		if c := closestNode(others, KeyOfName(name)); from.RoutingTable().Find(c.ID()) != "" {
			silent = c
		}
	}
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	var asked atomic.Int64
	silent.Host().SetStreamHandler(protocol.ID(silent.kadProtocols()), func(s network.Stream) {
		asked.Add(1)
		select {
		case <-done:
		case <-time.After(2 * lookup):
		}
		_ = s.Reset()
	})
	start := time.Now()
	got, err := from.LookupName(context.Background(), name)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("lookup past a silent peer: %v after %v", err, took)
	}
	if asked.Load() == 0 {
		t.Fatal("the silent peer was never asked")
	}
	var live []*Node
	for _, n := range others {
		if n != silent {
			live = append(live, n)
		}
	}
	if want := closestNode(live, KeyOfName(name)).ID(); len(got) == 0 || got[0] != want {
		t.Errorf("closest answer %v, want the closest peer that answers, %s", got, want)
	}
	if took >= lookup {
		t.Errorf("the lookup took %v, its whole timeout", took)
	}
}

func TestNode_NetworkSizeSmallNetworkIsExact(t *testing.T) {
	nodes := testNetwork(t, 12)
	for i, n := range nodes {
		if got := n.NetworkSize(); got != 12 {
			t.Errorf("node %d: network size %d, want 12 (routing table %d)", i, got, n.RoutingTable().Size())
		}
	}
}

func TestNode_BadClosestFramesAreCountedAndServiceGoesOn(t *testing.T) {
	nodes := testNetwork(t, 3)
	a, b := nodes[0], nodes[1]
	ctx := context.Background()
	send := func(raw []byte) {
		s, err := a.Host().NewStream(ctx, b.ID(), a.closestProtocol())
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		s.Write(raw)
		s.CloseWrite()
		buf := make([]byte, 1)
		s.Read(buf) // the server resets: wait for it to finish with us
	}
	send([]byte{0x05, 0xff, 0xff, 0xff, 0xff, 0xff})                     // not a protobuf
	send(append([]byte{0xc8, 0x01}, make([]byte, 200)...))               // over the cap
	bad, _ := proto.Marshal(&pb.ClosestRequest{Target: []byte{1, 2, 3}}) // short target
	send(append([]byte{byte(len(bad))}, bad...))
	drops := b.Stats().Drops()
	if drops[dropDecode] != 2 || drops[dropBadTarget] != 1 {
		t.Errorf("drops %v, want decode 2 and bad-target 1", drops)
	}
	// A caller whose stream ends before its request is whole (a length and
	// one byte of 34) is lost, not a bad frame.
	send([]byte{0x22, 0x0a})
	if drops := b.Stats().Drops(); drops[dropLost] != 1 || drops[dropDecode] != 2 {
		t.Errorf("drops %v after a request cut short: want lost 1, decode still 2", drops)
	}
	// The node still answers a good request.
	got, err := a.ask(ctx, b.ID(), a.Key(), 5)
	if err != nil || len(got) == 0 {
		t.Errorf("after bad frames: %v, %v", got, err)
	}
}

func TestDecodeClosest_DropsBadPeersAndAddresses(t *testing.T) {
	good, _ := peer.Decode("12D3KooWHCYgZzzBHF134pSTEcF3jL4ALD9yKdyHk1vErxKKdaHC")
	resp := &pb.ClosestResponse{Peers: []*pb.Peer{
		{Id: []byte(good), Addrs: [][]byte{{0xff, 0xff}, mustAddr(t, "/ip4/127.0.0.1/tcp/1")}},
		{Id: []byte("nonsense")},
	}}
	counts := map[string]int{}
	out := decodeClosest(resp, func(r string) { counts[r]++ })
	if len(out) != 1 || out[0].ID != good || len(out[0].Addrs) != 1 {
		t.Errorf("decoded %v", out)
	}
	if counts[dropBadPeer] != 1 || counts[dropBadAddress] != 1 {
		t.Errorf("drops %v", counts)
	}
}

func mustAddr(t *testing.T, s string) []byte {
	t.Helper()
	a, err := peer.AddrInfoFromString(s + "/p2p/12D3KooWHCYgZzzBHF134pSTEcF3jL4ALD9yKdyHk1vErxKKdaHC")
	if err != nil {
		t.Fatal(err)
	}
	return a.Addrs[0].Bytes()
}

// FuzzClosest feeds arbitrary bytes to both decoders of the closest
// protocol: the server's request reader and the client's answer reader.
func FuzzClosest(f *testing.F) {
	req, _ := proto.Marshal(&pb.ClosestRequest{Target: make([]byte, 32), Count: 20})
	f.Add(append([]byte{byte(len(req))}, req...))
	resp, _ := proto.Marshal(&pb.ClosestResponse{Peers: []*pb.Peer{{Id: []byte("x"), Addrs: [][]byte{{4, 127, 0, 0, 1}}}}})
	f.Add(append([]byte{byte(len(resp))}, resp...))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		var r pb.ClosestRequest
		_ = pbio.NewDelimitedReader(bytesReader(b), maxClosestRequest).ReadMsg(&r)
		var a pb.ClosestResponse
		if err := pbio.NewDelimitedReader(bytesReader(b), maxClosestResponse).ReadMsg(&a); err != nil {
			return
		}
		out := decodeClosest(&a, func(string) {})
		if len(out) > maxClosestCount {
			t.Fatalf("%d peers decoded, cap %d", len(out), maxClosestCount)
		}
		for _, ai := range out {
			if len(ai.Addrs) > maxAddrsPerPeer || ai.ID.Validate() != nil {
				t.Fatalf("decoded a bad peer %v", ai)
			}
		}
	})
}

// TestNode_ClosestAsksAFailedPeerAgain: the true closest peer drops its
// first request (as a loaded host's request times out); the lookup asks it
// again and still names it, instead of treating it as dead and answering
// with the next closest.
func TestNode_ClosestAsksAFailedPeerAgain(t *testing.T) {
	nodes := testNetwork(t, 30)
	ctx := context.Background()
	rng := rand.New(rand.NewSource(5))
	for i := 0; i < 5; i++ {
		var target Key
		rng.Read(target[:])
		want := closestNode(nodes, target)
		from := nodes[0]
		if from == want {
			from = nodes[1]
		}
		var dropped atomic.Int64
		want.Host().SetStreamHandler(want.closestProtocol(), func(s network.Stream) {
			if dropped.Add(1) == 1 {
				_ = s.Reset()
				return
			}
			want.handleClosest(s)
		})
		inBefore := from.RoutingTable().Find(want.ID()) != ""
		got, err := from.Closest(ctx, target, 1)
		if err != nil {
			t.Fatal(err)
		}
		if dropped.Load() < 2 {
			t.Fatalf("lookup %d: the closest peer got %d requests, want a second after the dropped one", i, dropped.Load())
		}
		if got[0] != want.ID() {
			t.Errorf("lookup %d: closest %s, want %s (its first request dropped)", i, got[0], want.ID())
		}
		// (Under load the join can leave a peer out of a table; only one
		// that was in may be checked for leaving.)
		if inBefore && from.RoutingTable().Find(want.ID()) == "" && from.Host().Network().Connectedness(want.ID()) == network.Connected {
			t.Errorf("lookup %d: a live peer whose request failed left the routing table", i)
		}
		want.Host().SetStreamHandler(want.closestProtocol(), want.handleClosest)
	}
}

// A peer that cannot be reached at all (its host gone) leaves the routing
// table of a node whose lookup tried it, as kad-dht's queries drop such a
// peer; the lookup answers the closest live peer.
func TestNode_ClosestDropsAnUnreachablePeer(t *testing.T) {
	nodes := testNetwork(t, 20)
	from := nodes[0]
	var dead *Node
	for _, n := range nodes[1:] {
		if from.RoutingTable().Find(n.ID()) != "" {
			dead = n
			break
		}
	}
	if dead == nil {
		t.Fatal("node 0's routing table is empty")
	}
	_ = dead.Close()
	_ = dead.Host().Close()
	got, err := from.Closest(context.Background(), dead.Key(), 1)
	if err != nil {
		t.Fatal(err)
	}
	var live []*Node
	for _, n := range nodes {
		if n != dead {
			live = append(live, n)
		}
	}
	if want := closestNode(live, dead.Key()).ID(); got[0] != want {
		t.Errorf("closest live peer to the dead one's key: %s, want %s", got[0], want)
	}
	if from.RoutingTable().Find(dead.ID()) != "" {
		t.Error("the unreachable peer is still in the routing table")
	}
}

// joinAll joins node i through a seeded random node before it, then has
// every node look itself up again so that the early joiners meet the late.
func joinAll(t *testing.T, ctx context.Context, nodes []*Node) {
	t.Helper()
	rng := rand.New(rand.NewSource(1))
	for i := 1; i < len(nodes); i++ {
		b := nodes[rng.Intn(i)]
		if err := nodes[i].Join(ctx, peer.AddrInfo{ID: b.ID(), Addrs: b.Host().Addrs()}); err != nil {
			t.Fatalf("node %d join: %v", i, err)
		}
	}
	for _, node := range nodes {
		if err := node.SelfLookup(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// knowNeighbours waits until every node's routing table holds its m
// XOR-nearest other nodes, looking itself up again while it does not: a
// lookup that ends once the nearest peers it met have answered (β = 3)
// misses the true closest peer if those lack it, as a one-time self-lookup
// left some tables on a loaded CI machine (kad-dht admits a peer only after
// its own liveness query).
func knowNeighbours(t *testing.T, nodes []*Node, m int) {
	t.Helper()
	lacking := func(nd *Node) []peer.ID {
		others := slices.DeleteFunc(slices.Clone(nodes), func(o *Node) bool { return o == nd })
		slices.SortFunc(others, func(a, b *Node) int {
			da, db := a.Key().Xor(nd.Key()), b.Key().Xor(nd.Key())
			return bytes.Compare(da[:], db[:])
		})
		var miss []peer.ID
		for _, o := range others[:min(m, len(others))] {
			if nd.RoutingTable().Find(o.ID()) == "" {
				miss = append(miss, o.ID())
			}
		}
		return miss
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for round := 0; ; round++ {
		var behind []*Node
		for _, nd := range nodes {
			if len(lacking(nd)) > 0 {
				behind = append(behind, nd)
			}
		}
		if len(behind) == 0 {
			if round > 0 {
				t.Logf("every table holds its %d nearest after %d more self-lookup rounds", m, round)
			}
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("%d nodes still lack some of their %d nearest (node %s: %v)", len(behind), m, behind[0].ID(), lacking(behind[0]))
		}
		for _, nd := range behind {
			nd.SelfLookup(ctx) // an error leaves it behind, and the next round tries again
		}
	}
}

// slowPair builds two linked nodes on mocknet, b (the bootstrap) and a (the
// joiner), not yet connected; the one named by slow ("a" or "b") runs
// kad-dht with no time at all for the liveness query that admits a new
// peer to its table, as on a loaded machine where that query times out.
func slowPair(t *testing.T, slow string) (ctx context.Context, mn mocknet.Mocknet, a, b *Node) {
	t.Helper()
	ctx, mn = linkedPair(t)
	node := func(i int, name string) *Node {
		opts := []Option{WithRoutingTableRefresh(0)}
		if name == slow {
			opts = append(opts, WithKadOptions(kaddht.RoutingTableRefreshQueryTimeout(time.Nanosecond)))
		}
		n, err := New(ctx, mn.Hosts()[i], opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		return n
	}
	b, a = node(0, "b"), node(1, "a")
	return ctx, mn, a, b
}

// linkedPair is two linked mocknet hosts, not connected, and a context
// for a test of a minute at most.
func linkedPair(t *testing.T) (context.Context, mocknet.Mocknet) {
	t.Helper()
	mn, err := mocknet.FullMeshLinked(2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx, mn
}

// kad-dht adds a connected peer to its table only once a liveness query to
// it answers; when that query fails (here it has no time at all, as on a
// loaded machine it can time out) Join adds the bootstrap peer itself,
// having seen it speak the DHT protocol, instead of failing.
func TestNode_JoinAddsABootstrapPeerKadDidNot(t *testing.T) {
	ctx, _, a, b := slowPair(t, "a")
	if err := a.Join(ctx, peer.AddrInfo{ID: b.ID(), Addrs: b.Host().Addrs()}); err != nil {
		t.Fatalf("join: %v", err)
	}
	if a.RoutingTable().Find(b.ID()) == "" {
		t.Fatal("the bootstrap peer is not in the routing table after Join")
	}
	got, err := a.Closest(ctx, b.Key(), 1)
	if err != nil || len(got) != 1 || got[0] != b.ID() {
		t.Fatalf("closest to the bootstrap peer's key: %v, %v", got, err)
	}
}

// A bootstrap peer that starts its DHT only after the joiner has waited
// bootstrapAdd for it (identify had not shown its protocol by then, as on
// a loaded machine): Join keeps trying to add it, and it enters the table
// once identify's push shows the protocol, instead of Join failing after
// 30 s on one early look.
func TestNode_JoinAddsABootstrapPeerThatSpeaksTheDHTLate(t *testing.T) {
	ctx, mn := linkedPair(t)
	hb := mn.Hosts()[0]
	a, err := New(ctx, mn.Hosts()[1], WithRoutingTableRefresh(0), WithKadOptions(kaddht.RoutingTableRefreshQueryTimeout(time.Nanosecond)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	joined := make(chan error, 1)
	start := time.Now()
	go func() { joined <- a.Join(ctx, peer.AddrInfo{ID: hb.ID(), Addrs: hb.Addrs()}) }()
	// The scenario, not a synchronisation: b speaks the DHT only once the
	// joiner's first attempt to add it has passed.
	time.Sleep(time.Until(start.Add(bootstrapAdd + 500*time.Millisecond)))
	select {
	case err := <-joined:
		t.Fatalf("join ended before the bootstrap peer ran the DHT: %v", err)
	default:
	}
	b, err := New(ctx, hb, WithRoutingTableRefresh(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if err := <-joined; err != nil {
		t.Fatalf("join: %v", err)
	}
	if a.RoutingTable().Find(b.ID()) == "" {
		t.Fatal("the bootstrap peer is not in the routing table after Join")
	}
}

// The other side of the same join: the bootstrap peer's kad-dht admits the
// joiner only after its own liveness query, which here never answers in
// time. Its self-lookup used to fail on the empty table ("failed to find
// any peer in table", seen on a loaded CI machine); it now waits for the
// connected peer to enter the table.
func TestNode_SelfLookupWaitsForAJoinerInTheTable(t *testing.T) {
	ctx, mn, a, b := slowPair(t, "b")
	if err := a.Join(ctx, peer.AddrInfo{ID: b.ID(), Addrs: b.Host().Addrs()}); err != nil {
		t.Fatalf("join: %v", err)
	}
	if err := b.SelfLookup(ctx); err != nil {
		t.Fatalf("the bootstrap peer's self-lookup: %v", err)
	}
	if b.RoutingTable().Find(a.ID()) == "" {
		t.Fatal("the joiner is not in the bootstrap peer's table after its self-lookup")
	}
	// A node with no connection has nothing to wait for: it fails at once.
	h, err := mn.GenPeer()
	if err != nil {
		t.Fatal(err)
	}
	lone, err := New(ctx, h, WithRoutingTableRefresh(0))
	if err != nil {
		t.Fatal(err)
	}
	defer lone.Close()
	start := time.Now()
	if err := lone.SelfLookup(ctx); err == nil {
		t.Fatal("a self-lookup with an empty table and no connection succeeded")
	} else if waited := time.Since(start); waited > bootstrapAdd {
		t.Fatalf("a node with no connection waited %v before failing", waited)
	}
}

// A lookup calls off the requests it still has out once it has its answer
// (they went to farther peers); they are counted as called off, not as
// failures or bad frames: on a network where every peer is alive and
// answers, no request fails. (They were counted as failures: 31% of a
// 200-peer swarm's requests.)
func TestNode_ClosestCountsCalledOffRequestsApart(t *testing.T) {
	mn := mocknet.New()
	mn.SetLinkDefaults(mocknet.LinkOptions{Latency: 5 * time.Millisecond})
	for range 30 {
		if _, err := mn.GenPeer(); err != nil {
			t.Fatal(err)
		}
	}
	if err := mn.LinkAll(); err != nil {
		t.Fatal(err)
	}
	nodes := testNetworkOn(t, mn)
	sum := func(f func(*Stats) uint64) (n uint64) {
		for _, nd := range nodes {
			n += f(nd.Stats())
		}
		return n
	}
	sent0 := sum(func(s *Stats) uint64 { return s.ClosestSent.Load() })
	failed0 := sum(func(s *Stats) uint64 { return s.ClosestFailed.Load() })
	rng := rand.New(rand.NewSource(3))
	for i := 0; i < 30; i++ {
		var target Key
		rng.Read(target[:])
		if _, err := nodes[rng.Intn(len(nodes))].Closest(context.Background(), target, 1); err != nil {
			t.Fatal(err)
		}
	}
	sent := sum(func(s *Stats) uint64 { return s.ClosestSent.Load() }) - sent0
	failed := sum(func(s *Stats) uint64 { return s.ClosestFailed.Load() }) - failed0
	off := sum(func(s *Stats) uint64 { return s.ClosestCancelled.Load() })
	decode := sum(func(s *Stats) uint64 { return s.Drops()[dropDecode] })
	t.Logf("30 lookups: %d requests, %d called off, %d failed", sent, off, failed)
	if failed != 0 || decode != 0 {
		t.Errorf("%d of %d requests failed and %d frames dropped as bad, with every peer alive", failed, sent, decode)
	}
	if off == 0 || off >= sent {
		t.Errorf("%d of %d requests called off: want some (α = 3 keeps farther requests out when the closest answer)", off, sent)
	}
}

// TestNode_ClosestResiliencyEndsEarlierAndStaysExact: with the default β the
// lookup stops once the 3 closest live peers have answered, so it sends fewer
// requests than one that waits for all k = 20 (WithResiliency(20)) and still
// names the true closest peer every time.
func TestNode_ClosestResiliencyEndsEarlierAndStaysExact(t *testing.T) {
	const n, lookups = 80, 40
	sent := map[int]uint64{}
	for _, beta := range []int{3, 20} {
		nodes := testNetwork(t, n, WithResiliency(beta))
		knowNeighbours(t, nodes, 8)
		total := func() (sum uint64) {
			for _, nd := range nodes {
				sum += nd.Stats().ClosestSent.Load()
			}
			return sum
		}
		before := total()
		rng := rand.New(rand.NewSource(5))
		for i := 0; i < lookups; i++ {
			var target Key
			rng.Read(target[:])
			from := nodes[rng.Intn(len(nodes))]
			got, err := from.Closest(context.Background(), target, 1)
			if err != nil {
				t.Fatalf("β=%d lookup %d: %v", beta, i, err)
			}
			if want := closestNode(nodes, target).ID(); got[0] != want {
				t.Errorf("β=%d lookup %d: closest %s, want %s", beta, i, got[0], want)
			}
		}
		sent[beta] = total() - before
		t.Logf("β=%d: %.1f closest requests a lookup", beta, float64(sent[beta])/lookups)
	}
	if sent[3] >= sent[20] {
		t.Errorf("β=3 sent %d requests, β=20 %d: the earlier termination saved nothing", sent[3], sent[20])
	}
	if _, err := New(context.Background(), nil, WithResiliency(0)); err == nil || !strings.Contains(err.Error(), "WithResiliency") {
		t.Errorf("WithResiliency(0): %v, want its own error", err)
	}
}

// A node whose host is connected already when its own kad-dht starts
// watches the routing table by polling, not by kad-dht's callbacks (kad-dht
// may be adding a peer while New would write them: a data race the race
// detector found under CI's load), and its watchers still hear of the
// peers added.
func TestNode_StartedOnAConnectedHostReportsRoutingEvents(t *testing.T) {
	ctx, mn := linkedPair(t)
	h0, h1 := mn.Hosts()[0], mn.Hosts()[1]
	b, err := New(ctx, h1, WithRoutingTableRefresh(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if _, err := mn.ConnectPeers(h0.ID(), h1.ID()); err != nil {
		t.Fatal(err)
	}
	a, err := New(ctx, h0, WithRoutingTableRefresh(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	events, stop := a.WatchRoutingTable()
	defer stop()
	if err := a.Join(ctx, peer.AddrInfo{ID: h1.ID(), Addrs: h1.Addrs()}); err != nil {
		t.Fatalf("join: %v", err)
	}
	for {
		select {
		case ev := <-events:
			if ev.Peer == h1.ID() && ev.Added {
				return
			}
		case <-ctx.Done():
			t.Fatal("no routing event for the peer the joiner added")
		}
	}
}
