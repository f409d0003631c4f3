package sim

import (
	"math/bits"
	"math/rand"
	"slices"
	"testing"
	"time"

	"github.com/superpeer-overlay/superpeer/dht"
	"github.com/superpeer-overlay/superpeer/experiments/metrics"
	"github.com/superpeer-overlay/superpeer/superpeer"
)

// prefixOracle is the yardstick Prefix once was: the ideal outcome computed
// directly, with no selector run. Every peer's superpeer is the peer
// XOR-closest to its superpeer key; clients attach to it in index order,
// and with capacity C > 0 a client finding it full takes the first other
// group's superpeer with room in GroupsByDistance order.
func prefixOracle(keys []dht.Key, scheme superpeer.Prefix, capacity int) PrefixResult {
	G := scheme.Groups()
	r := PrefixResult{Leader: make([]int, G), Group: make([]int32, len(keys)), Assignment: make(metrics.Assignment, len(keys))}
	for g := range r.Leader {
		r.Leader[g] = -1
	}
	for i, k := range keys {
		g := scheme.Group(k)
		r.Group[i] = int32(g)
		if l := r.Leader[g]; l < 0 || scheme.GroupKey(g).Closer(k, keys[l]) {
			r.Leader[g] = i
		}
	}
	isLeader := make([]bool, len(keys))
	for _, l := range r.Leader {
		if l >= 0 {
			r.Superpeers = append(r.Superpeers, l)
			isLeader[l] = true
		}
	}
	slices.Sort(r.Superpeers)
	load := make([]int, G)
	for i := range keys {
		if isLeader[i] {
			r.Assignment[i] = i
			continue
		}
		g := int(r.Group[i])
		if capacity <= 0 || load[g] < capacity {
			load[g]++
			r.Assignment[i] = r.Leader[g]
			continue
		}
		r.Assignment[i] = metrics.Unassigned
		for _, h := range scheme.GroupsByDistance(g) {
			if r.Leader[h] >= 0 && load[h] < capacity {
				load[h]++
				r.Assignment[i] = r.Leader[h]
				r.Overflow++
				break
			}
		}
	}
	return r
}

func randomKeys(seed int64, n int) []dht.Key {
	rng := rand.New(rand.NewSource(seed))
	keys := make([]dht.Key, n)
	for i := range keys {
		rng.Read(keys[i][:])
	}
	return keys
}

// checkPrefix checks what any run of the prefix method must give: the
// oracle's superpeers, every client with its group's superpeer unless that
// one is full, no superpeer over capacity, and everyone served when there
// is room for everyone.
func checkPrefix(t *testing.T, keys []dht.Key, scheme superpeer.Prefix, C int, got, want PrefixResult) {
	t.Helper()
	if !slices.Equal(got.Superpeers, want.Superpeers) || !slices.Equal(got.Leader, want.Leader) {
		t.Fatalf("superpeers %v, the oracle's %v", got.Superpeers, want.Superpeers)
	}
	if !slices.Equal(got.Group, want.Group) {
		t.Fatal("groups differ")
	}
	load := map[int]int{}
	for i, a := range got.Assignment {
		if a >= 0 && a != i {
			load[a]++
		}
	}
	overflow := 0
	for i, a := range got.Assignment {
		home := got.Leader[got.Group[i]]
		switch {
		case a == home:
		case C <= 0:
			t.Fatalf("peer %d served by %d, its superpeer is %d, no capacity bound", i, a, home)
		case load[home] < C:
			t.Fatalf("peer %d served by %d though its superpeer %d has %d of %d", i, a, home, load[home], C)
		case a == metrics.Unassigned:
			if room := C*len(got.Superpeers) - (len(keys) - len(got.Superpeers)); room >= 0 {
				t.Fatalf("peer %d unserved with room for every client", i)
			}
		default:
			overflow++
		}
	}
	if overflow != got.Overflow {
		t.Fatalf("overflow %d, counted %d", got.Overflow, overflow)
	}
	for sp, l := range load {
		if C > 0 && l > C {
			t.Fatalf("superpeer %d serves %d > %d", sp, l, C)
		}
	}
}

// The simulation runs the live selector's core; its outcome is the
// oracle's: the same superpeers always, the same assignment whenever
// capacity sends nobody away, and the oracle's properties when it does
// (clients meet full superpeers in the order of their steps, not of their
// indices, so which ones overflow where may differ).
func TestPrefix_CoreAgreesWithOracle(t *testing.T) {
	for _, c := range []struct {
		seed int64
		n, S int
		pow2 bool
	}{
		{1, 1, 4, false}, {2, 2, 1, false}, {3, 60, 8, false}, {4, 300, 16, false},
		{5, 300, 100, false}, {6, 500, 12, true}, {7, 2000, 30, false},
	} {
		keys := randomKeys(c.seed, c.n)
		scheme, err := superpeer.Exact(c.S)
		if c.pow2 {
			scheme, err = superpeer.Pow2(bits.Len(uint(c.S - 1)))
		}
		if err != nil {
			t.Fatal(err)
		}
		size := make([]int, scheme.Groups())
		for _, k := range keys {
			size[scheme.Group(k)]++
		}
		largest := slices.Max(size) - 1 // clients of the largest group
		mean := max(1, c.n/c.S)
		for _, C := range []int{0, max(1, largest), mean, 2 * mean} {
			got, want := Prefix(keys, scheme, C), prefixOracle(keys, scheme, C)
			checkPrefix(t, keys, scheme, C, got, want)
			if want.Overflow == 0 && !slices.Equal(got.Assignment, want.Assignment) {
				t.Fatalf("n %d S %d C %d: no overflow, yet assignments differ", c.n, c.S, C)
			}
			if C > 0 && C < largest && got.Overflow == 0 {
				t.Fatalf("n %d S %d C %d: nobody overflowed a group of %d clients", c.n, c.S, C, largest)
			}
			t.Logf("n %4d S %3d C %4d: %3d superpeers, overflow %3d (oracle %3d), %5d lookups, %6d requests, %5.1f s virtual",
				c.n, c.S, C, len(got.Superpeers), got.Overflow, want.Overflow, got.Lookups, got.Requests, got.Seconds)
		}
	}
}

// Every peer makes one lookup when all goes well: its group's superpeer is
// known at once and has room.
func TestPrefix_OneLookupAPeerWithoutOverflow(t *testing.T) {
	keys := randomKeys(9, 400)
	scheme, _ := superpeer.Exact(8)
	r := Prefix(keys, scheme, 0)
	if r.Lookups < len(keys) || r.Lookups > len(keys)+len(keys)/10 {
		t.Fatalf("%d lookups for %d peers", r.Lookups, len(keys))
	}
	if r.Seconds > 10 {
		t.Fatalf("settled after %.1f virtual seconds", r.Seconds)
	}
}

// Too little room: the run goes to its limit, everyone who fits is served
// and the rest are not.
func TestPrefix_NoRoomLeavesSomeUnserved(t *testing.T) {
	keys := randomKeys(10, 100)
	scheme, _ := superpeer.Exact(4)
	const C = 10 // 40 places for 96 clients
	got := Prefix(keys, scheme, C)
	checkPrefix(t, keys, scheme, C, got, prefixOracle(keys, scheme, C))
	unserved := 0
	for _, a := range got.Assignment {
		if a == metrics.Unassigned {
			unserved++
		}
	}
	if want := len(keys) - len(got.Superpeers) - C*len(got.Superpeers); unserved != want {
		t.Fatalf("%d unserved, want %d", unserved, want)
	}
	if got.Seconds < prefixLimit.Seconds() {
		t.Fatalf("run ended at %.0f s with peers unserved", got.Seconds)
	}
}

// A change of S by one, given to every peer's PrefixCore of a converged
// network (as WithFraction's census does), re-selects only the peers of
// the group that split or the two that merged: the others keep their
// superpeer and only renew. Every peer is served again under the new
// code by exactly its occupied groups' superpeers.
func TestPrefixRescheme_OnlyTheChangedGroupSteps(t *testing.T) {
	keys := randomKeys(17, 1000)
	for _, c := range []struct{ from, to int }{{10, 11}, {11, 10}, {16, 17}, {17, 16}, {31, 32}, {2, 3}} {
		from, err := superpeer.Exact(c.from)
		if err != nil {
			t.Fatal(err)
		}
		to, err := superpeer.Exact(c.to)
		if err != nil {
			t.Fatal(err)
		}
		r, err := PrefixRescheme(keys, from, to, 2*((1000+c.to-1)/c.to), 3*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("S %d → %d: %d peers in the changed groups, %d attached anew, %d moved", c.from, c.to, r.Members, r.Attached, r.Moved)
		if r.Members == 0 || r.Members > 2*1000/min(c.from, c.to)+100 {
			t.Errorf("S %d → %d: %d peers in changed groups", c.from, c.to, r.Members)
		}
		if r.Attached > r.Members || r.Moved > r.Members {
			t.Errorf("S %d → %d: %d attached anew and %d moved, more than the %d in the changed groups", c.from, c.to, r.Attached, r.Moved, r.Members)
		}
		if r.Moved == 0 {
			t.Errorf("S %d → %d: nobody moved", c.from, c.to)
		}
		if got, want := len(r.After.Superpeers), OccupiedGroups(keys, to); got != want {
			t.Errorf("S %d → %d: %d superpeers after, want %d", c.from, c.to, got, want)
		}
		for i, a := range r.After.Assignment {
			if a < 0 {
				t.Fatalf("S %d → %d: peer %d unserved after", c.from, c.to, i)
			}
		}
	}
}
