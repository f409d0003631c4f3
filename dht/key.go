package dht

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"math/bits"
	"sort"

	kb "github.com/libp2p/go-libp2p-kbucket"
	"github.com/libp2p/go-libp2p/core/peer"
)

// KeyBits is m, the width of the key space.
const KeyBits = 256

// Key is a point of the kad key space: SHA-256 of a peer ID's bytes for a
// peer, as kad-dht computes it (kbucket.ConvertPeerID). Distance is XOR.
type Key [32]byte

// KeyOf is the kad key of a peer.
func KeyOf(p peer.ID) Key {
	var k Key
	copy(k[:], kb.ConvertPeerID(p))
	return k
}

// KeyOfName hashes a name into the key space, the way everything that picks
// "a peer without coordination" names its target (e.g. "repel-token/3").
func KeyOfName(name string) Key { return sha256.Sum256([]byte(name)) }

// Xor is the XOR distance between two keys.
func (k Key) Xor(o Key) Key {
	var d Key
	for i := range k {
		d[i] = k[i] ^ o[i]
	}
	return d
}

// Less orders keys as big-endian integers.
func (k Key) Less(o Key) bool { return bytes.Compare(k[:], o[:]) < 0 }

// Closer reports whether a is XOR-closer to k than b is.
func (k Key) Closer(a, b Key) bool { return a.Xor(k).Less(b.Xor(k)) }

// CommonPrefixLen is the number of leading bits k and o share.
func (k Key) CommonPrefixLen(o Key) int {
	for i := range k {
		if x := k[i] ^ o[i]; x != 0 {
			return i*8 + bits.LeadingZeros8(x)
		}
	}
	return KeyBits
}

// Hex is the key in lower-case hex.
func (k Key) Hex() string { return hex.EncodeToString(k[:]) }

func (k Key) String() string { return k.Hex()[:16] + "…" }

// sortByDistance orders peers by the XOR distance of their keys to target,
// closest first; ties (equal keys, i.e. equal IDs) keep their order.
func sortByDistance(target Key, peers []peer.ID) {
	keys := make(map[peer.ID]Key, len(peers))
	for _, p := range peers {
		keys[p] = KeyOf(p)
	}
	sort.SliceStable(peers, func(i, j int) bool {
		return target.Closer(keys[peers[i]], keys[peers[j]])
	})
}
