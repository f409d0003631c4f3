package testbed

import (
	"math/rand"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/superpeer-overlay/superpeer/dht"
	"github.com/superpeer-overlay/superpeer/experiments/metrics"
	"github.com/superpeer-overlay/superpeer/experiments/swarm"
	"github.com/superpeer-overlay/superpeer/superpeer"
)

// view makes n peers with seeded identities, all live, none answering yet.
func view(t *testing.T, n int) View {
	t.Helper()
	v := View{IDs: make([]string, n), Keys: make([]dht.Key, n), Live: make([]bool, n), Status: make([]*Status, n)}
	r := rand.New(rand.NewSource(3))
	for i := 0; i < n; i++ {
		sk, _, err := crypto.GenerateEd25519Key(r)
		if err != nil {
			t.Fatal(err)
		}
		id, _ := peer.IDFromPrivateKey(sk)
		v.IDs[i], v.Keys[i], v.Live[i] = id.String(), dht.KeyOf(id), true
	}
	return v
}

func TestView_DHT(t *testing.T) {
	v := view(t, 8)
	nearest := swarm.NearestKeys(v.Keys)
	for i := range v.IDs {
		v.Status[i] = &Status{ID: v.IDs[i], RoutingTable: []string{v.IDs[nearest[i]]}}
	}
	if st := v.DHT(); !st.Converged() {
		t.Fatalf("%+v, want converged", st)
	}
	v.Status[2].RoutingTable = nil
	v.Status[5] = nil
	if st := v.DHT(); st.Missing != 1 || st.Unanswered != 1 {
		t.Errorf("%+v, want one missing, one unanswered", st)
	}
	// A dead peer is no one's nearest any more, and answers for nothing.
	v = view(t, 8)
	v.Live[nearest[0]] = false
	v.Status[nearest[0]] = nil
	live := v.LiveIndices()
	keys := make([]dht.Key, len(live))
	for k, i := range live {
		keys[k] = v.Keys[i]
	}
	ln := swarm.NearestKeys(keys)
	for k, i := range live {
		v.Status[i] = &Status{RoutingTable: []string{v.IDs[live[ln[k]]]}}
	}
	if st := v.DHT(); !st.Converged() {
		t.Errorf("%+v after a death, want converged", st)
	}
}

// prefixView is a converged prefix selection with S = 3 over 12 peers:
// every expected superpeer serves its group.
func prefixView(t *testing.T) (View, superpeer.Prefix) {
	v := view(t, 12)
	sc, err := superpeer.Exact(3)
	if err != nil {
		t.Fatal(err)
	}
	exp := v.ExpectedSuperpeers(sc)
	for i := range v.IDs {
		v.Status[i] = &Status{ID: v.IDs[i]}
	}
	for _, j := range exp {
		v.Status[j].Role = "superpeer"
	}
	for i := range v.IDs {
		j := exp[sc.Group(v.Keys[i])]
		if j == i {
			continue
		}
		v.Status[i].Role, v.Status[i].Superpeer = "client", v.IDs[j]
		v.Status[j].Clients = append(v.Status[j].Clients, v.IDs[i])
	}
	return v, sc
}

func TestView_PrefixExact(t *testing.T) {
	v, sc := prefixView(t)
	st := v.Prefix(sc, 0)
	if !st.Exact() || len(st.Superpeers) != len(st.Expected) || !st.Attached(len(st.Expected)) {
		t.Fatalf("converged selection not exact: %s", st.RoleState)
	}
	// Every assignment is the group's superpeer.
	for i, j := range st.Assignment {
		if j < 0 {
			t.Errorf("peer %d unassigned", i)
		}
	}
	// A client that claims to be a superpeer.
	c := -1
	for i := range v.IDs {
		if v.Status[i].Role == "client" {
			c = i
			break
		}
	}
	v.Status[c].Role = "superpeer"
	if st := v.Prefix(sc, 0); st.Exact() || st.Kinds["false superpeer"] != 1 {
		t.Errorf("false superpeer: %s", st.RoleState)
	}
	v.Status[c].Role = "client"
	// A client its superpeer does not list.
	j := st.Assignment[c]
	v.Status[j].Clients = nil
	if st := v.Prefix(sc, 0); st.Exact() || st.Kinds["attached wrong"] == 0 {
		t.Errorf("unlisted clients: %s", st.RoleState)
	}
}

func TestView_PrefixAwayWithRoom(t *testing.T) {
	v, sc := prefixView(t)
	st := v.Prefix(sc, 0)
	// Move one client to another group's superpeer, which lists it.
	var c, home, other int = -1, -1, -1
	for i := range v.IDs {
		if v.Status[i].Role == "client" {
			c, home = i, st.Assignment[i]
			break
		}
	}
	for _, j := range st.Expected {
		if j != home {
			other = j
			break
		}
	}
	v.Status[c].Superpeer = v.IDs[other]
	v.Status[other].Clients = append(v.Status[other].Clients, v.IDs[c])
	if st := v.Prefix(sc, 0); st.Exact() || st.Kinds["away with room"] != 1 {
		t.Errorf("away from a home with room: %s", st.RoleState)
	}
	// With the home full (capacity its load), away is right.
	load := len(v.Status[home].Clients)
	if st := v.Prefix(sc, load); st.Kinds["away with room"] != 0 {
		t.Errorf("away from a full home counted wrong: %s", st.RoleState)
	}
}

func TestView_RolesUnservedAndRoom(t *testing.T) {
	v, sc := prefixView(t)
	for i := range v.IDs {
		if v.Status[i].Role == "client" {
			v.Status[i].Superpeer = ""
			break
		}
	}
	st := v.Prefix(sc, 0)
	if st.Unserved != 1 || st.Exact() {
		t.Errorf("an unserved client with room: %s", st.RoleState)
	}
	v.Status[0] = nil
	if st := v.Roles(0); st.Unanswered != 1 || st.Settled() {
		t.Errorf("an unanswered peer: %s", st)
	}
}

func TestView_RepelTokens(t *testing.T) {
	v := view(t, 6)
	for i := range v.IDs {
		v.Status[i] = &Status{Role: "client"}
	}
	hold := func(i int, id uint32, settled, surveyed bool) {
		v.Status[i].Token = &struct {
			ID       uint32 `json:"id"`
			Epoch    uint64 `json:"epoch"`
			Settled  bool   `json:"settled"`
			Surveyed bool   `json:"surveyed"`
		}{ID: id, Epoch: 1, Settled: settled, Surveyed: surveyed}
		if settled {
			v.Status[i].Role = "superpeer"
		}
	}
	hold(0, 0, true, true)
	hold(1, 1, true, false)
	hold(2, 1, false, false)
	st := v.Repel(3, 0)
	if st.Missing != 1 || st.Duplicated != 1 || st.Unsettled != 1 || st.Unsurveyed != 1 || st.TokensBack() {
		t.Errorf("%s", st)
	}
	// Every token once, settled and surveyed, every client attached.
	v = view(t, 6)
	for i := range v.IDs {
		v.Status[i] = &Status{Role: "client"}
	}
	hold(0, 0, true, true)
	hold(1, 1, true, true)
	for i := 2; i < 6; i++ {
		sp := i % 2
		v.Status[i].Superpeer = v.IDs[sp]
		v.Status[sp].Clients = append(v.Status[sp].Clients, v.IDs[i])
	}
	if st := v.Repel(2, 0); !st.Converged(2, true) || !st.Attached(2) {
		t.Errorf("%s, want converged", st)
	}
}

func TestSummarize(t *testing.T) {
	p := plan(t, 10, TUN)
	live := []int{0, 1, 2, 3, 4, 5, 6, 7, 9} // 8 is dead
	a := make(metrics.Assignment, 10)
	for i := range a {
		a[i] = 0
	}
	a[8] = metrics.Unassigned
	sum, err := Summarize("prefix", p.RTT, live, a, []int{0}, 0, 0, 1, 0, 3*time.Second, rand.New(rand.NewSource(1)))
	if err != nil {
		t.Fatal(err)
	}
	// Clients 1..7 and 9 at 10·j + 0.5 ms from peer 0.
	want := 0.0
	for _, j := range []int{1, 2, 3, 4, 5, 6, 7, 9} {
		want += float64(10*j) + 0.5
	}
	want /= 8
	if d := sum.ClientRTT.Mean - want; d > 1e-9 || d < -1e-9 {
		t.Errorf("client RTT mean %v, want %v", sum.ClientRTT.Mean, want)
	}
	// Peer 0 is every peer's nearest: the k-median picks it.
	if sum.KMedianClientRTT.Mean != sum.ClientRTT.Mean || sum.RandomClientRTT.Mean < sum.KMedianClientRTT.Mean {
		t.Errorf("k-median %v, random %v, this %v", sum.KMedianClientRTT.Mean, sum.RandomClientRTT.Mean, sum.ClientRTT.Mean)
	}
	if sum.Count != 1 || sum.ConvergeSeconds != 3 || sum.ClientsPerSuperpeer.Max != 8 {
		t.Errorf("summary %+v", sum)
	}
}

// TestView_EligibleOnly: with NAT'd peers ineligible, the expected
// superpeers are the eligible peers nearest their group keys (one outside
// its group for a group of NAT'd peers only), and the overlay is converged
// when every table holds its nearest eligible peer.
func TestView_EligibleOnly(t *testing.T) {
	v := view(t, 12)
	sc, err := superpeer.Exact(3)
	if err != nil {
		t.Fatal(err)
	}
	all := v.ExpectedSuperpeers(sc)
	// Make every peer of group 0 but none of the others ineligible, and
	// one more peer: the superpeer of group 1.
	v.Eligible = make([]bool, len(v.IDs))
	for i := range v.IDs {
		v.Eligible[i] = sc.Group(v.Keys[i]) != 0 && i != all[1]
	}
	exp := v.ExpectedSuperpeers(sc)
	for g, j := range exp {
		if !v.Eligible[j] {
			t.Errorf("group %d: superpeer %d is not eligible", g, j)
		}
		gk := sc.GroupKey(g)
		for i := range v.IDs {
			if v.Eligible[i] && gk.Closer(v.Keys[i], v.Keys[j]) {
				t.Errorf("group %d: %d is nearer its key than the expected %d", g, i, j)
			}
		}
	}
	if exp[1] == all[1] || exp[2] != all[2] {
		t.Errorf("group 1 keeps %d (was %d, ineligible now), group 2 %d (was %d)", exp[1], all[1], exp[2], all[2])
	}
	if sc.Group(v.Keys[exp[0]]) == 0 {
		t.Errorf("group 0 has no eligible peer, yet its superpeer %d is in it", exp[0])
	}
	// The DHT: every table holding its nearest eligible peer is converged.
	for i := range v.IDs {
		near := -1
		for j := range v.IDs {
			if j != i && v.Eligible[j] && (near < 0 || v.Keys[i].Closer(v.Keys[j], v.Keys[near])) {
				near = j
			}
		}
		v.Status[i] = &Status{ID: v.IDs[i], RoutingTable: []string{v.IDs[near]}}
	}
	if st := v.DHT(); !st.Converged() {
		t.Errorf("%+v, want converged over the eligible peers", st)
	}
	v.Eligible = nil
	if st := v.DHT(); st.Converged() {
		t.Errorf("with every peer a server, tables lacking an ineligible nearest peer still count as converged")
	}
}
