package superpeer

import (
	"math/rand"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/superpeer-overlay/superpeer/dht"
)

// PuzzleKey finds an identity with the bits asked for, the same one from
// the same seed, in about 2^c derivations on average.
func TestPuzzleKey_SolvesAndCosts2ToTheC(t *testing.T) {
	const c, keys = 5, 200
	total := 0
	for i := 0; i < keys; i++ {
		sk, tries, err := PuzzleKey(rand.New(rand.NewSource(int64(i))), c)
		if err != nil {
			t.Fatal(err)
		}
		id, _ := peer.IDFromPrivateKey(sk)
		if PuzzleBits(id) < c || !SolvesPuzzle(id, c) {
			t.Fatalf("key %d: %d puzzle bits, asked for %d", i, PuzzleBits(id), c)
		}
		again, _, _ := PuzzleKey(rand.New(rand.NewSource(int64(i))), c)
		if !again.Equals(sk) {
			t.Fatalf("key %d: another key from the same seed", i)
		}
		total += tries
	}
	// Geometric with p = 1/32: the mean of 200 is 32 ± 2.2 (one σ).
	if mean := float64(total) / keys; mean < 24 || mean > 40 {
		t.Errorf("mean tries %.1f, want about %d", mean, 1<<c)
	}
	if _, _, err := PuzzleKey(rand.New(rand.NewSource(1)), MaxPuzzleBits+1); err == nil {
		t.Error("a puzzle past MaxPuzzleBits was accepted")
	}
	if _, err := NewPrefixCore("p", dht.Key{}, Prefix{s: 1}, WithIDPuzzle(-1)); err == nil {
		t.Error("WithIDPuzzle(-1) was accepted")
	}
	if _, err := NewPrefixCore("p", dht.Key{}, Prefix{s: 1}, WithSalt(nil)); err == nil {
		t.Error("WithSalt(nil) was accepted")
	}
}

// PuzzleBits counts the leading zero bits of SHA-256 of the kad key.
func TestPuzzleBits_CountsLeadingZeros(t *testing.T) {
	for _, c := range []struct {
		h    [32]byte
		want int
	}{{[32]byte{0x80}, 0}, {[32]byte{0x01}, 7}, {[32]byte{0, 0x40}, 9}, {[32]byte{}, 256}} {
		if got := leadingZeros(c.h); got != c.want {
			t.Errorf("leadingZeros(%x) = %d, want %d", c.h[:2], got, c.want)
		}
	}
	if !SolvesPuzzle("anything", 0) {
		t.Error("a puzzle of 0 bits is not solved by every identity")
	}
}

// EpochSalt asks the beacon for the epoch now falls in.
func TestEpochSalt_AsksTheEpochOfNow(t *testing.T) {
	var asked []uint64
	salt := EpochSalt(time.Hour, func(e uint64) [32]byte { asked = append(asked, e); return [32]byte{byte(e)} })
	at := time.Unix(7*3600+5, 0)
	if got := salt(at); got != [32]byte{7} || asked[0] != 7 {
		t.Errorf("salt at epoch 7: %v, beacon asked for %v", got[:1], asked)
	}
	if got := EpochSalt(0, func(e uint64) [32]byte { return [32]byte{byte(e + 1)} })(at); got != [32]byte{1} {
		t.Errorf("a period of 0: %v, want epoch 0's", got[:1])
	}
}
