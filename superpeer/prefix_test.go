package superpeer

import (
	"math"
	"math/rand"
	"sort"
	"testing"

	"github.com/superpeer-overlay/superpeer/dht"
)

func keyWithTop(bits uint64, n int) dht.Key {
	var k dht.Key
	v := bits << (64 - n)
	for i := 0; i < 8; i++ {
		k[i] = byte(v >> (56 - 8*i))
	}
	k[31] = 0xff // some low bits, which the mask must clear
	return k
}

func TestPrefix_Table(t *testing.T) {
	cases := []struct {
		name       string
		p          func() (Prefix, error)
		groups, k  int
		topBits    uint64 // top 8 bits of a key
		group      int
		groupKeyHi byte // first byte of the group key
	}{
		{"S=1", func() (Prefix, error) { return Exact(1) }, 1, 0, 0b1011_0110, 0, 0},
		{"S=2", func() (Prefix, error) { return Exact(2) }, 2, 1, 0b1011_0110, 1, 0b1000_0000},
		{"S=8 top 101", func() (Prefix, error) { return Exact(8) }, 8, 3, 0b1011_0110, 5, 0b1010_0000},
		{"pow2 k=3 as S=5", func() (Prefix, error) { return Pow2(3) }, 8, 3, 0b1011_0110, 5, 0b1010_0000},
		// S=5: k=3, 1 split 2-bit prefix (00 → groups 0,1), then 01→2, 10→3, 11→4.
		{"S=5 top 001", func() (Prefix, error) { return Exact(5) }, 5, 3, 0b0010_0000, 1, 0b0010_0000},
		{"S=5 top 000", func() (Prefix, error) { return Exact(5) }, 5, 3, 0b0001_1111, 0, 0},
		{"S=5 top 01", func() (Prefix, error) { return Exact(5) }, 5, 3, 0b0110_0000, 2, 0b0100_0000},
		{"S=5 top 10", func() (Prefix, error) { return Exact(5) }, 5, 3, 0b1011_0110, 3, 0b1000_0000},
		{"S=5 top 11", func() (Prefix, error) { return Exact(5) }, 5, 3, 0b1111_1111, 4, 0b1100_0000},
		{"S=50", func() (Prefix, error) { return Exact(50) }, 50, 6, 0b1111_1111, 49, 0b1111_1000},
	}
	for _, c := range cases {
		p, err := c.p()
		if err != nil {
			t.Fatal(err)
		}
		key := keyWithTop(c.topBits, 8)
		if p.Groups() != c.groups || p.Bits() != c.k {
			t.Errorf("%s: %d groups of %d bits, want %d of %d", c.name, p.Groups(), p.Bits(), c.groups, c.k)
		}
		if g := p.Group(key); g != c.group {
			t.Errorf("%s: group %d, want %d", c.name, g, c.group)
		}
		sk := p.SuperpeerKey(key)
		if sk[0] != c.groupKeyHi || sk[31] != 0 {
			t.Errorf("%s: superpeer key starts %08b ends %x, want %08b … 00", c.name, sk[0], sk[31], c.groupKeyHi)
		}
		if p.Group(sk) != p.Group(key) {
			t.Errorf("%s: the superpeer key is outside its own group", c.name)
		}
	}
	for _, bad := range []int{0, -1} {
		if _, err := Exact(bad); err == nil {
			t.Errorf("Exact(%d) succeeded", bad)
		}
	}
	if _, err := Pow2(maxPrefixBits + 1); err == nil {
		t.Error("Pow2 beyond the limit succeeded")
	}
	if bitsFor(50) != 6 || bitsFor(64) != 6 || bitsFor(65) != 7 || bitsFor(1) != 0 {
		t.Error("bitsFor is not ⌈log2 S⌉")
	}
}

// naiveSuperpeers is the reference: sort all keys, and each group's superpeer
// is its smallest member.
func naiveSuperpeers(p Prefix, keys []dht.Key) map[int]dht.Key {
	sorted := append([]dht.Key(nil), keys...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Less(sorted[j]) })
	out := map[int]dht.Key{}
	for _, k := range sorted {
		if _, ok := out[p.Group(k)]; !ok {
			out[p.Group(k)] = k
		}
	}
	return out
}

func TestPrefix_SuperpeerIsXORClosestMatchesNaive(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for trial := 0; trial < 300; trial++ {
		var p Prefix
		var err error
		if trial%2 == 0 {
			p, err = Exact(1 + rng.Intn(100))
		} else {
			p, err = Pow2(rng.Intn(8))
		}
		if err != nil {
			t.Fatal(err)
		}
		keys := make([]dht.Key, 1+rng.Intn(300))
		for i := range keys {
			rng.Read(keys[i][:])
		}
		want := naiveSuperpeers(p, keys)
		got := map[int]dht.Key{}
		for _, k := range keys {
			// The superpeer of k: the XOR-closest key to sk(k) over all keys.
			sk := p.SuperpeerKey(k)
			best := keys[0]
			for _, o := range keys[1:] {
				if sk.Closer(o, best) {
					best = o
				}
			}
			g := p.Group(k)
			if p.Group(best) != g {
				t.Fatalf("trial %d: superpeer of group %d lies in group %d", trial, g, p.Group(best))
			}
			got[g] = best
		}
		if len(got) != len(want) {
			t.Fatalf("trial %d: %d superpeers, naive %d", trial, len(got), len(want))
		}
		for g, k := range want {
			if got[g] != k {
				t.Fatalf("trial %d group %d: superpeer differs from the naive one", trial, g)
			}
		}
	}
}

func TestPrefix_GroupsPartitionTheSpaceEvenly(t *testing.T) {
	for _, s := range []int{1, 2, 3, 5, 8, 50, 100, 127, 128, 129} {
		p, err := Exact(s)
		if err != nil {
			t.Fatal(err)
		}
		var total float64
		mean := 1 / float64(s)
		for g := 0; g < p.Groups(); g++ {
			total += p.Share(g)
			if r := p.Share(g) / mean; r > 2 || r < 0.5 {
				t.Errorf("S=%d group %d covers %.3f× the mean share", s, g, r)
			}
			if p.Group(p.GroupKey(g)) != g {
				t.Errorf("S=%d: group key of %d maps to group %d", s, g, p.Group(p.GroupKey(g)))
			}
		}
		if math.Abs(total-1) > 1e-12 {
			t.Errorf("S=%d: shares sum to %v", s, total)
		}
		if got := len(p.GroupsByDistance(0)); got != s-1 {
			t.Errorf("S=%d: GroupsByDistance lists %d groups", s, got)
		}
	}
}

func TestPrefix_ExpectedCount(t *testing.T) {
	p, _ := Pow2(4)
	// Lo et al.'s formula 2^k·(1 − (1 − 2^−k)^n).
	for _, n := range []int{1, 10, 100, 1000} {
		want := 16 * (1 - math.Pow(1-1.0/16, float64(n)))
		if got := p.ExpectedCount(n); math.Abs(got-want) > 1e-9 {
			t.Errorf("n=%d: %v, want %v", n, got, want)
		}
	}
	// Monte Carlo for an exact scheme.
	e, _ := Exact(50)
	rng := rand.New(rand.NewSource(3))
	const n, trials = 120, 400
	var sum float64
	for i := 0; i < trials; i++ {
		seen := map[int]bool{}
		for j := 0; j < n; j++ {
			var k dht.Key
			rng.Read(k[:])
			seen[e.Group(k)] = true
		}
		sum += float64(len(seen))
	}
	if mc, ex := sum/trials, e.ExpectedCount(n); math.Abs(mc-ex) > 0.5 {
		t.Errorf("Monte Carlo %v vs expected %v", mc, ex)
	}
}

// Exact codes change one group at a time: going from S to S+1 groups keeps
// every group key of S and adds one, which takes the upper half of one group
// of S; only the keys of that half get a new superpeer key. Going back from
// S+1 to S merges the two halves again, the same keys in reverse.
func TestPrefix_ExactChangesOneGroupPerStep(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	keys := make([]dht.Key, 20000)
	for i := range keys {
		rng.Read(keys[i][:])
	}
	for s := 1; s <= 300; s++ {
		a, _ := Exact(s)
		b, _ := Exact(s + 1)
		old := map[dht.Key]bool{}
		for g := 0; g < a.Groups(); g++ {
			old[a.GroupKey(g)] = true
		}
		var added []dht.Key
		for g := 0; g < b.Groups(); g++ {
			if !old[b.GroupKey(g)] {
				added = append(added, b.GroupKey(g))
			}
		}
		if len(added) != 1 {
			t.Fatalf("S=%d→%d: %d new group keys, want 1", s, s+1, len(added))
		}
		split := -1
		moved := 0
		for _, k := range keys {
			before, after := a.SuperpeerKey(k), b.SuperpeerKey(k)
			if before == after {
				continue
			}
			moved++
			if after != added[0] {
				t.Fatalf("S=%d→%d: a key moved to %x, not to the new group", s, s+1, after[:4])
			}
			if g := a.Group(k); split < 0 {
				split = g
			} else if g != split {
				t.Fatalf("S=%d→%d: keys of groups %d and %d moved", s, s+1, split, g)
			}
		}
		share := b.Share(b.Group(added[0]))
		if want := share * float64(len(keys)); math.Abs(float64(moved)-want) > 5*math.Sqrt(want)+1 {
			t.Fatalf("S=%d→%d: %d keys moved, want about %.0f (the new group's share %.4f)", s, s+1, moved, want, share)
		}
	}
}

// A salted code keeps every key's group and the group's prefix in its key;
// the bits after the prefix follow the salt, so another salt moves every
// group key within its group.
func TestPrefix_SaltedKeepsGroupsAndMovesKeys(t *testing.T) {
	for _, S := range []int{1, 2, 5, 8, 100} {
		plain, err := Exact(S)
		if err != nil {
			t.Fatal(err)
		}
		a, b := plain.Salted([32]byte{1}), plain.Salted([32]byte{2})
		if s, ok := a.Salt(); !ok || s != [32]byte{1} {
			t.Fatalf("S=%d: Salt() = %v, %v", S, s[:1], ok)
		}
		if _, ok := plain.Salt(); ok {
			t.Fatalf("S=%d: an unsalted code says it is salted", S)
		}
		for g := 0; g < S; g++ {
			ka, kb := a.GroupKey(g), b.GroupKey(g)
			if a.Group(ka) != g || b.Group(kb) != g || plain.Group(ka) != g {
				t.Fatalf("S=%d group %d: salted key in group %d/%d", S, g, a.Group(ka), b.Group(kb))
			}
			if ka == kb || ka == plain.GroupKey(g) {
				t.Fatalf("S=%d group %d: the salt did not move the key", S, g)
			}
			if ka != plain.Salted([32]byte{1}).GroupKey(g) {
				t.Fatalf("S=%d group %d: the same salt gave another key", S, g)
			}
		}
		rng := rand.New(rand.NewSource(int64(S)))
		for i := 0; i < 100; i++ {
			var k dht.Key
			rng.Read(k[:])
			if a.Group(k) != plain.Group(k) {
				t.Fatalf("S=%d: salting moved a key to another group", S)
			}
		}
	}
}
