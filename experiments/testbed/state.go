package testbed

import (
	"fmt"
	"math"
	"math/rand"
	"sort"
	"time"

	"github.com/superpeer-overlay/superpeer/dht"
	"github.com/superpeer-overlay/superpeer/experiments/latency"
	"github.com/superpeer-overlay/superpeer/experiments/metrics"
	"github.com/superpeer-overlay/superpeer/experiments/swarm"
	"github.com/superpeer-overlay/superpeer/superpeer"
)

// Status is the part of a peer's /status (`peer run --http`) the bed reads.
type Status struct {
	ID           string   `json:"id"`
	Role         string   `json:"role"`
	Superpeer    string   `json:"superpeer"`
	Clients      []string `json:"clients"`
	Key          string   `json:"key"`
	RoutingTable []string `json:"routing_table"`
	NetworkSize  int      `json:"network_size"`
	Coord        *struct {
		Vec    []float64 `json:"vec"`
		Height float64   `json:"height"`
		Error  float64   `json:"error"`
	} `json:"coord"`
	Token *struct {
		ID       uint32 `json:"id"`
		Epoch    uint64 `json:"epoch"`
		Settled  bool   `json:"settled"`
		Surveyed bool   `json:"surveyed"`
	} `json:"token"`
	KnownTokens *int     `json:"known_tokens"`
	Addrs       []string `json:"addrs"`
	// Vivaldi counts a repel peer's samples, and those whose RTT was the
	// transport's (`peer run --rtt transport`).
	Vivaldi *struct {
		Samples       uint64 `json:"samples"`
		TransportRTTs uint64 `json:"transport_rtts"`
	} `json:"vivaldi"`
	// Relay is the peer's circuit relays (`peer run --relay`).
	Relay *RelayStatus `json:"relay"`
}

// RelayStatus is /status's relay block: the relays a peer holds
// reservations with, and its own relay's load.
type RelayStatus struct {
	Mode    string   `json:"mode"`
	Held    []string `json:"held"`
	Serving *struct {
		Running             bool   `json:"running"`
		Capacity            int    `json:"capacity"`
		Reservations        int    `json:"reservations"`
		ReservationsAllowed uint64 `json:"reservations_allowed"`
		ReservationsRefused uint64 `json:"reservations_refused"`
		Circuits            int    `json:"circuits"`
		CircuitsTotal       uint64 `json:"circuits_total"`
	} `json:"serving"`
}

// View is the bed's peers as their last statuses show them.
type View struct {
	// IDs and Keys are peer i's ID and key, known before it starts.
	IDs  []string
	Keys []dht.Key
	// Live is whether peer i counts: running and not cut off.
	Live []bool
	// Status is peer i's last answer (nil: none since it started, or since
	// it was cut off and brought back).
	Status []*Status
	// Eligible is whether peer i may be a superpeer (nil: every peer):
	// peers behind NAT are not (their identities fail the ID puzzle).
	Eligible []bool
}

func (v View) index() map[string]int {
	m := make(map[string]int, len(v.IDs))
	for i, id := range v.IDs {
		m[id] = i
	}
	return m
}

// LiveIndices lists the peers that count.
func (v View) LiveIndices() []int {
	var out []int
	for i, l := range v.Live {
		if l {
			out = append(out, i)
		}
	}
	return out
}

// DHTState is how far the overlay is from converged: Missing live peers
// whose routing table lacks their XOR-nearest live peer, Unanswered live
// peers with no status yet.
type DHTState struct{ Missing, Unanswered int }

// Converged is true when every live peer answers and knows its nearest.
func (s DHTState) Converged() bool { return s.Missing == 0 && s.Unanswered == 0 }

// DHT checks every live peer's routing table for its XOR-nearest live peer
// (the condition `peer swarm` waits for).
//
// With Eligible set, only eligible peers serve the DHT (the others, behind
// NAT, are kad-dht clients in nobody's table): every live peer's table
// must hold its XOR-nearest live eligible peer.
func (v View) DHT() DHTState {
	live := v.LiveIndices()
	var servers []int
	for _, i := range live {
		if v.Eligible == nil || v.Eligible[i] {
			servers = append(servers, i)
		}
	}
	var nearest []int // with every peer a server: by position in live
	if v.Eligible == nil {
		keys := make([]dht.Key, len(live))
		for k, i := range live {
			keys[k] = v.Keys[i]
		}
		nearest = swarm.NearestKeys(keys)
	}
	var st DHTState
	for k, i := range live {
		s := v.Status[i]
		if s == nil {
			st.Unanswered++
			continue
		}
		near := -1
		if nearest != nil {
			if nearest[k] >= 0 {
				near = live[nearest[k]]
			}
		} else {
			for _, j := range servers {
				if j != i && (near < 0 || v.Keys[i].Closer(v.Keys[j], v.Keys[near])) {
					near = j
				}
			}
		}
		if near < 0 {
			continue
		}
		want := v.IDs[near]
		found := false
		for _, p := range s.RoutingTable {
			if p == want {
				found = true
				break
			}
		}
		if !found {
			st.Missing++
		}
	}
	return st
}

// RoleState is the selection the live peers report, checked the way `peer
// swarm` checks any method's.
type RoleState struct {
	// Superpeers are the live peers that say they are superpeers, sorted.
	Superpeers []int
	// Assignment is every peer's superpeer (its own for a superpeer;
	// metrics.Unassigned for the unserved, the wrong and the dead).
	Assignment metrics.Assignment
	// Undecided have no role yet; Wrong are clients attached to a peer that
	// is no live superpeer or does not list them; Unserved, clients
	// attached to nobody; Unanswered, live peers with no status.
	Undecided, Wrong, Unserved, Unanswered int
	// Room is the superpeers' spare capacity (the live peers' number when
	// unbounded).
	Room int
	// Kinds counts wrong peers by kind; Examples describes the first few.
	Kinds    map[string]int
	Examples []string
}

func (st *RoleState) wrong(kind, format string, args ...any) {
	st.Wrong++
	if st.Kinds == nil {
		st.Kinds = map[string]int{}
	}
	st.Kinds[kind]++
	if len(st.Examples) < 3 {
		st.Examples = append(st.Examples, fmt.Sprintf(format, args...))
	}
}

// Settled is true when every live peer answers with a role, there is a
// superpeer, and every client is attached to one that lists it (or
// capacity has run out).
func (st RoleState) Settled() bool {
	return len(st.Superpeers) > 0 && st.Unanswered == 0 && st.Undecided == 0 && st.Wrong == 0 && (st.Unserved == 0 || st.Room == 0)
}

// Attached is true when there are exactly S superpeers and every live
// client is attached to one of them that lists it.
func (st RoleState) Attached(S int) bool {
	return len(st.Superpeers) == S && st.Unanswered == 0 && st.Undecided == 0 && st.Wrong == 0 && st.Unserved == 0
}

func (st RoleState) String() string {
	s := fmt.Sprintf("%d superpeers, %d undecided, %d wrong, %d unserved (room %d), %d unanswered", len(st.Superpeers), st.Undecided, st.Wrong, st.Unserved, st.Room, st.Unanswered)
	if st.Wrong > 0 {
		s += fmt.Sprintf(" %v %q", st.Kinds, st.Examples)
	}
	return s
}

// Roles reads the live peers' roles and attachments.
func (v View) Roles(capacity int) RoleState {
	idx := v.index()
	st := RoleState{Assignment: make(metrics.Assignment, len(v.IDs))}
	for i := range st.Assignment {
		st.Assignment[i] = metrics.Unassigned
	}
	live := v.LiveIndices()
	clients := map[int]map[string]bool{}
	for _, i := range live {
		if s := v.Status[i]; s != nil && s.Role == superpeer.Superpeer.String() {
			st.Superpeers = append(st.Superpeers, i)
			st.Assignment[i] = i
			set := map[string]bool{}
			for _, c := range s.Clients {
				set[c] = true
			}
			clients[i] = set
		}
	}
	served := map[int]int{}
	for _, i := range live {
		s := v.Status[i]
		switch {
		case s == nil:
			st.Unanswered++
			continue
		case st.Assignment[i] == i:
			continue
		case s.Role != superpeer.Client.String():
			st.Undecided++
			continue
		case s.Superpeer == "":
			st.Unserved++
			continue
		}
		j, ok := idx[s.Superpeer]
		if !ok || clients[j] == nil || !clients[j][v.IDs[i]] {
			st.wrong("attached wrong", "peer %d is attached to %d (a live superpeer: %v, lists it: %v)", i, j, ok && clients[j] != nil, ok && clients[j][v.IDs[i]])
			continue
		}
		st.Assignment[i] = j
		served[j]++
	}
	st.Room = len(live)
	if capacity > 0 {
		st.Room = 0
		for _, j := range st.Superpeers {
			st.Room += max(0, capacity-served[j])
		}
	}
	return st
}

// PrefixState is the prefix method's selection checked against what all
// live keys call for.
type PrefixState struct {
	RoleState
	// Expected are the superpeers the keys call for: in every occupied
	// group, the live member XOR-closest to the group key. Sorted.
	Expected []int
}

// Exact is true when the superpeers are exactly the expected ones, every
// client is attached to one that lists it — its group's, unless that one
// is full — and no client is unserved while capacity remains.
func (st PrefixState) Exact() bool {
	return st.Unanswered == 0 && st.Undecided == 0 && st.Wrong == 0 && (st.Unserved == 0 || st.Room == 0)
}

// ExpectedSuperpeers is, for the live eligible peers' keys, the superpeer
// of every group a live peer is in: the eligible peer XOR-closest to the
// group key (within the group when it has an eligible peer, as the
// selector's lookup finds it).
func (v View) ExpectedSuperpeers(scheme superpeer.Prefix) map[int]int {
	var elig []int
	for _, i := range v.LiveIndices() {
		if v.Eligible == nil || v.Eligible[i] {
			elig = append(elig, i)
		}
	}
	key := func(i int) dht.Key { return v.Keys[i] }
	best := scheme.Superpeers(elig, key)
	if len(elig) == 0 {
		return best
	}
	for _, i := range v.LiveIndices() {
		g := scheme.Group(v.Keys[i])
		if _, ok := best[g]; ok {
			continue
		}
		gk := scheme.GroupKey(g)
		b := elig[0]
		for _, j := range elig[1:] {
			if gk.Closer(v.Keys[j], v.Keys[b]) {
				b = j
			}
		}
		best[g] = b
	}
	return best
}

// Prefix checks the selection against the scheme (as `peer swarm` does).
func (v View) Prefix(scheme superpeer.Prefix, capacity int) PrefixState {
	st := PrefixState{RoleState: v.Roles(capacity)}
	expected := v.ExpectedSuperpeers(scheme)
	isExpected := map[int]bool{}
	for _, i := range expected {
		if !isExpected[i] {
			st.Expected = append(st.Expected, i)
		}
		isExpected[i] = true
	}
	sort.Ints(st.Expected)
	isSP := map[int]bool{}
	load := map[int]int{}
	for _, i := range st.Superpeers {
		isSP[i] = true
		if !isExpected[i] {
			st.wrong("false superpeer", "peer %d says it is a superpeer", i)
		}
		if s := v.Status[i]; s != nil {
			load[i] = len(s.Clients)
		}
	}
	for _, i := range st.Expected {
		if !isSP[i] && v.Status[i] != nil {
			st.wrong("missing superpeer", "peer %d should be a superpeer", i)
		}
	}
	for _, i := range v.LiveIndices() {
		j := st.Assignment[i]
		if j < 0 || j == i {
			continue
		}
		if !isExpected[j] {
			// Attached to a false superpeer: counted there already.
			continue
		}
		home := expected[scheme.Group(v.Keys[i])]
		if j != home && (capacity == 0 || load[home] < capacity) {
			st.wrong("away with room", "peer %d is served by %d away from its group's superpeer %d, which has room", i, j, home)
		}
	}
	return st
}

// RepelState is the repel method's tokens beside the roles.
type RepelState struct {
	RoleState
	// Missing tokens are held by no live peer; Duplicated ones by more
	// than one; Unsettled holders have not held theirs for T_settle yet;
	// Unsurveyed, settled ones no survey has kept in place yet.
	Missing, Duplicated, Unsettled, Unsurveyed int
}

// TokensBack is true when every token is held by exactly one live peer.
func (st RepelState) TokensBack() bool { return st.Missing == 0 && st.Duplicated == 0 }

// Converged is true when every token is held once and settled (and
// surveyed, with surveys), there are exactly S superpeers, and every
// client is attached to one that lists it (or capacity has run out).
func (st RepelState) Converged(S int, surveys bool) bool {
	return st.TokensBack() && st.Unsettled == 0 && (!surveys || st.Unsurveyed == 0) && len(st.Superpeers) == S && st.Settled()
}

func (st RepelState) String() string {
	return fmt.Sprintf("%s; tokens %d missing, %d duplicated, %d unsettled, %d unsurveyed", st.RoleState, st.Missing, st.Duplicated, st.Unsettled, st.Unsurveyed)
}

// Repel checks the S tokens the live peers hold.
func (v View) Repel(S, capacity int) RepelState {
	st := RepelState{RoleState: v.Roles(capacity)}
	held := make([]int, S)
	for _, i := range v.LiveIndices() {
		s := v.Status[i]
		if s == nil || s.Token == nil {
			continue
		}
		if int(s.Token.ID) < S {
			held[s.Token.ID]++
		}
		if !s.Token.Settled {
			st.Unsettled++
		} else if !s.Token.Surveyed {
			st.Unsurveyed++
		}
	}
	for _, h := range held {
		switch {
		case h == 0:
			st.Missing++
		case h > 1:
			st.Duplicated++
		}
	}
	return st
}

// subRTT is an RTT space restricted to some peers.
type subRTT struct {
	rtt latency.RTTs
	idx []int
}

func (s subRTT) Len() int             { return len(s.idx) }
func (s subRTT) RTT(i, j int) float64 { return s.rtt.RTT(s.idx[i], s.idx[j]) }

// Summarize scores a selection over the live peers against the true RTTs,
// beside S random superpeers and the greedy k-median (capacity applied to
// all), in the shape of `peer swarm`'s report. a and sps index all peers;
// the dead in live are left out. The per-peer traffic is not known here.
func Summarize(method string, rtt latency.RTTs, live []int, a metrics.Assignment, sps []int, unserved, wrong, S, capacity int, converge time.Duration, rng *rand.Rand) (swarm.SelectionSummary, error) {
	sum := swarm.SelectionSummary{
		Method: method, Target: S, Groups: S, Count: len(sps), Expected: float64(S),
		Capacity: capacity, Unserved: unserved, Wrong: wrong, ConvergeSeconds: converge.Seconds(),
	}
	l := subRTT{rtt: rtt, idx: live}
	back := map[int]int{}
	for k, i := range live {
		back[i] = k
	}
	la := make(metrics.Assignment, len(live))
	for k, i := range live {
		la[k] = metrics.Unassigned
		if a[i] >= 0 {
			if j, ok := back[a[i]]; ok {
				la[k] = j
			}
		}
	}
	var lsp []int
	for _, i := range sps {
		if j, ok := back[i]; ok {
			lsp = append(lsp, j)
		}
	}
	rs := func(s metrics.Summary) swarm.RTTSummary {
		return swarm.RTTSummary{Mean: s.Mean, P50: s.P50, P90: s.P90}
	}
	ev, err := metrics.Evaluate(l, la, lsp, capacity)
	if err != nil {
		return sum, err
	}
	sum.ClientsPerSuperpeer = swarm.LoadSummary{Max: ev.Load.Max, Mean: ev.Load.Mean, Gini: ev.Load.Gini}
	sum.ClientRTT = rs(ev.ClientRTT)
	rsp := metrics.RandomSuperpeers(l.Len(), S, rng)
	if rb, err := metrics.Evaluate(l, metrics.AssignWithCapacity(l, rsp, capacity), rsp, capacity); err == nil {
		sum.RandomClientRTT = rs(rb.ClientRTT)
	}
	km := metrics.GreedyKMedian(l, S)
	if kev, err := metrics.Evaluate(l, metrics.AssignWithCapacity(l, km, capacity), km, capacity); err == nil {
		sum.KMedianClientRTT = rs(kev.ClientRTT)
	}
	if len(lsp) > 0 {
		if pev, err := metrics.Evaluate(l, metrics.AssignWithCapacity(l, lsp, capacity), lsp, capacity); err == nil {
			sum.PlacementClientRTT = rs(pev.ClientRTT)
		}
	}
	return sum, nil
}

// TransportShare is the share of the live peers' Vivaldi samples whose
// RTT was the transport's own (NaN: no samples reported).
func (v View) TransportShare() float64 {
	var n, t uint64
	for _, i := range v.LiveIndices() {
		if s := v.Status[i]; s != nil && s.Vivaldi != nil {
			n += s.Vivaldi.Samples
			t += s.Vivaldi.TransportRTTs
		}
	}
	if n == 0 {
		return math.NaN()
	}
	return float64(t) / float64(n)
}

// VivaldiError is the live peers' coordinates' median and p90 relative
// error against the RTTs over every pair that both report (NaN: fewer than
// two coordinates). Coordinates are in seconds, RTTs in milliseconds.
func (v View) VivaldiError(rtt latency.RTTs) (median, p90 float64) {
	var idx []int
	for _, i := range v.LiveIndices() {
		if s := v.Status[i]; s != nil && s.Coord != nil && len(s.Coord.Vec) > 0 {
			idx = append(idx, i)
		}
	}
	var errs []float64
	for a := 0; a < len(idx); a++ {
		for b := a + 1; b < len(idx); b++ {
			ca, cb := v.Status[idx[a]].Coord, v.Status[idx[b]].Coord
			if len(ca.Vec) != len(cb.Vec) {
				continue
			}
			d := 0.0
			for k := range ca.Vec {
				x := ca.Vec[k] - cb.Vec[k]
				d += x * x
			}
			pred := 1000 * (math.Sqrt(d) + ca.Height + cb.Height)
			if r := rtt.RTT(idx[a], idx[b]); r > 0 {
				errs = append(errs, math.Abs(pred-r)/r)
			}
		}
	}
	if len(errs) == 0 {
		return math.NaN(), math.NaN()
	}
	p := metrics.Percentiles(errs, 0.5, 0.9)
	return p[0], p[1]
}
