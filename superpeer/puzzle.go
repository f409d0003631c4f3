package superpeer

import (
	"crypto/sha256"
	"fmt"
	"io"
	"math/bits"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/superpeer-overlay/superpeer/dht"
)

// MaxPuzzleBits bounds WithIDPuzzle: 2^24 key derivations are minutes of
// a core for every honest identity.
const MaxPuzzleBits = 24

// PuzzleBits is how many leading zero bits SHA-256(key(p)) has, key(p)
// being p's kad key (dht.KeyOf): S/Kademlia's static puzzle, H(H(ID)). An
// identity with c bits took about 2^c key derivations to find, and nobody
// can choose where in the key space it lands and solve the puzzle apart:
// the position is H(ID), the puzzle H(H(ID)).
func PuzzleBits(p peer.ID) int {
	k := dht.KeyOf(p)
	return leadingZeros(sha256.Sum256(k[:]))
}

func leadingZeros(h [32]byte) int {
	n := 0
	for _, b := range h {
		if b != 0 {
			return n + bits.LeadingZeros8(b)
		}
		n += 8
	}
	return n
}

// SolvesPuzzle reports whether p's identity has at least c puzzle bits.
func SolvesPuzzle(p peer.ID, c int) bool { return c <= 0 || PuzzleBits(p) >= c }

// PuzzleKey derives Ed25519 keys from r until one's peer ID has c puzzle
// bits, and returns it with the number of keys derived (about 2^c). From a
// seeded r the key is the same every time.
func PuzzleKey(r io.Reader, c int) (crypto.PrivKey, int, error) {
	if c < 0 || c > MaxPuzzleBits {
		return nil, 0, fmt.Errorf("superpeer: puzzle of %d bits not in [0, %d]", c, MaxPuzzleBits)
	}
	for tries := 1; ; tries++ {
		sk, _, err := crypto.GenerateEd25519Key(r)
		if err != nil {
			return nil, tries, err
		}
		id, err := peer.IDFromPrivateKey(sk)
		if err != nil {
			return nil, tries, err
		}
		if SolvesPuzzle(id, c) {
			return sk, tries, nil
		}
	}
}
