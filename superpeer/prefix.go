package superpeer

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"

	"github.com/superpeer-overlay/superpeer/dht"
)

// maxPrefixBits bounds k: 2^32 groups are far more superpeers than any
// network has.
const maxPrefixBits = 32

// Prefix is the reserved-ID-bits scheme: the key space is cut into groups by
// the top bits of a key, and the superpeer of a peer is the live peer
// XOR-closest to its group key (the group's prefix followed by zeros) — the
// group member with the smallest remaining bits.
//
// Lo et al. reserve k = ⌈log2 S⌉ bits, giving 2^k groups: up to twice the S
// superpeers asked for. A Prefix built by Exact keeps k bits for some groups
// and k−1 for the others (a prefix code), so that there are exactly S groups;
// a group of k−1 bits covers twice the key space of one of k bits, so no
// group's expected load passes 2× the mean. Pow2 is Lo et al.'s scheme.
type Prefix struct {
	k     int // bits of the longest group prefix
	split int // how many (k−1)-bit prefixes are split into two k-bit groups
	s     int // groups
	// salt, if salted, fills each group key's bits after the prefix
	// (Salted).
	salt   [32]byte
	salted bool
}

// Salted is the same code with each group key's bits after its prefix
// drawn from the salt: SHA-256(salt ‖ g), group g's prefix kept. The groups
// and their members do not change, but the group's superpeer becomes the
// member XOR-closest to a point of the group that nobody could know before
// the salt: an identity derived before it is no nearer that point than any
// honest member's, so an attacker holding a fraction f of the identities
// holds about f of the groups, and grinding for a group has to start anew
// with each salt. A salt has to reach every peer at once and nobody ahead
// of time (WithSalt).
func (p Prefix) Salted(salt [32]byte) Prefix {
	p.salt, p.salted = salt, true
	return p
}

// Salt is the salt of a Salted code, and whether there is one.
func (p Prefix) Salt() ([32]byte, bool) { return p.salt, p.salted }

// withSaltOf is p with q's salt (or none, as q).
func (p Prefix) withSaltOf(q Prefix) Prefix {
	p.salt, p.salted = q.salt, q.salted
	return p
}

// Pow2 is Lo et al.'s scheme: k reserved bits, 2^k groups.
func Pow2(k int) (Prefix, error) {
	if k < 0 || k > maxPrefixBits {
		return Prefix{}, fmt.Errorf("superpeer: %d reserved bits not in [0, %d]", k, maxPrefixBits)
	}
	if k == 0 {
		return Prefix{s: 1}, nil
	}
	return Prefix{k: k, split: 1 << (k - 1), s: 1 << k}, nil
}

// bitsFor is k = ⌈log2 S⌉.
func bitsFor(s int) int {
	if s <= 1 {
		return 0
	}
	return bits.Len(uint(s - 1))
}

// Exact makes exactly S groups with prefixes of ⌈log2 S⌉ and ⌈log2 S⌉−1 bits.
func Exact(s int) (Prefix, error) {
	if s < 1 || s > 1<<maxPrefixBits {
		return Prefix{}, fmt.Errorf("superpeer: %d superpeers not in [1, 2^%d]", s, maxPrefixBits)
	}
	k := bitsFor(s)
	if k == 0 {
		return Prefix{s: 1}, nil
	}
	half := 1 << (k - 1)
	return Prefix{k: k, split: s - half, s: s}, nil
}

// Groups is the number of groups, the superpeer count when all are occupied.
func (p Prefix) Groups() int { return p.s }

// Bits is k, the length of the longest group prefix.
func (p Prefix) Bits() int { return p.k }

// top returns the first n bits of key as an integer (n ≤ 32).
func top(key dht.Key, n int) uint64 {
	if n == 0 {
		return 0
	}
	return binary.BigEndian.Uint64(key[:8]) >> (64 - n)
}

// Group is the group index of key, in [0, Groups()).
func (p Prefix) Group(key dht.Key) int {
	if p.k == 0 {
		return 0
	}
	t := int(top(key, p.k-1))
	if t < p.split {
		return 2*t + int(top(key, p.k)&1)
	}
	return 2*p.split + (t - p.split)
}

// depth is the prefix length of group g in bits.
func (p Prefix) depth(g int) int {
	if p.k == 0 {
		return 0
	}
	if g < 2*p.split {
		return p.k
	}
	return p.k - 1
}

// Superpeers is, over the peers idx whose keys key gives, the superpeer of
// every occupied group: group → the peer whose key is XOR-closest to the
// group key.
func (p Prefix) Superpeers(idx []int, key func(i int) dht.Key) map[int]int {
	best := map[int]int{}
	for _, i := range idx {
		k := key(i)
		g := p.Group(k)
		if b, ok := best[g]; !ok || p.GroupKey(g).Closer(k, key(b)) {
			best[g] = i
		}
	}
	return best
}

// GroupKey is group g's prefix followed by zeros (by the salt's bits,
// Salted): the key whose XOR-closest live peer is the group's superpeer.
func (p Prefix) GroupKey(g int) dht.Key {
	var key dht.Key
	if p.salted {
		var in [36]byte
		copy(in[:32], p.salt[:])
		binary.BigEndian.PutUint32(in[32:], uint32(g))
		key = sha256.Sum256(in[:])
	}
	if p.k == 0 {
		return key
	}
	var prefix uint64
	depth := p.depth(g)
	if depth == p.k {
		prefix = uint64(g)
	} else {
		prefix = uint64(p.split + (g - 2*p.split))
	}
	low := binary.BigEndian.Uint64(key[:8]) & (1<<(64-depth) - 1)
	binary.BigEndian.PutUint64(key[:8], prefix<<(64-depth)|low)
	return key
}

// SuperpeerKey is key AND the mask of its group: sk(p) = key(p) AND mask.
func (p Prefix) SuperpeerKey(key dht.Key) dht.Key { return p.GroupKey(p.Group(key)) }

// Share is the fraction of the key space that group g covers.
func (p Prefix) Share(g int) float64 { return math.Ldexp(1, -p.depth(g)) }

// ExpectedCount is the expected number of occupied groups, and so of
// superpeers, among n peers with uniformly random keys:
// Σ_g 1 − (1 − share_g)^n. For Lo et al.'s scheme it is 2^k·(1 − (1 − 2^−k)^n).
func (p Prefix) ExpectedCount(n int) float64 {
	occupied := func(share float64) float64 { return -math.Expm1(float64(n) * math.Log1p(-share)) }
	if p.k == 0 {
		return occupied(1)
	}
	deep := 2 * p.split
	return float64(deep)*occupied(math.Ldexp(1, -p.k)) + float64(p.s-deep)*occupied(math.Ldexp(1, -(p.k-1)))
}

// GroupsByDistance lists every group other than g, nearest first by the XOR
// distance of their group keys: the order in which a client refused by its
// own superpeer tries the others.
func (p Prefix) GroupsByDistance(g int) []int {
	own := p.GroupKey(g)
	out := make([]int, 0, p.s-1)
	for h := 0; h < p.s; h++ {
		if h != g {
			out = append(out, h)
		}
	}
	keys := make(map[int]dht.Key, len(out))
	for _, h := range out {
		keys[h] = p.GroupKey(h)
	}
	sortInts(out, func(a, b int) bool { return own.Closer(keys[a], keys[b]) })
	return out
}
