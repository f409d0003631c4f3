package dht

import (
	"bytes"
	"crypto/sha256"
	"io"
	"math/rand"
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"
)

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

func TestKey_OfPeerIsSHA256OfIDBytes(t *testing.T) {
	p, err := peer.Decode("12D3KooWHCYgZzzBHF134pSTEcF3jL4ALD9yKdyHk1vErxKKdaHC")
	if err != nil {
		t.Fatal(err)
	}
	if KeyOf(p) != Key(sha256.Sum256([]byte(p))) {
		t.Error("KeyOf is not SHA-256 of the ID bytes")
	}
}

func TestKey_XorAndCommonPrefix(t *testing.T) {
	var a, b Key
	a[0], b[0] = 0b1010_0000, 0b1011_0000
	if got := a.CommonPrefixLen(b); got != 3 {
		t.Errorf("CommonPrefixLen = %d, want 3", got)
	}
	if a.CommonPrefixLen(a) != KeyBits {
		t.Error("a key shares all bits with itself")
	}
	if d := a.Xor(b); d[0] != 0b0001_0000 {
		t.Errorf("Xor = %08b", d[0])
	}
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < 1000; i++ {
		var x, y, z Key
		rng.Read(x[:])
		rng.Read(y[:])
		rng.Read(z[:])
		// XOR distance: d(x,y) = d(y,x); unique nearest point; exactly one of
		// y, z is closer unless equal.
		if x.Xor(y) != y.Xor(x) || (x.Closer(y, z) == x.Closer(z, y) && y != z) {
			t.Fatal("XOR distance properties violated")
		}
	}
}

func TestSortByDistance(t *testing.T) {
	ids := []peer.ID{"a", "b", "c", "d", "e", "f"}
	target := KeyOfName("t")
	sortByDistance(target, ids)
	for i := 1; i < len(ids); i++ {
		if target.Closer(KeyOf(ids[i]), KeyOf(ids[i-1])) {
			t.Fatalf("not sorted at %d", i)
		}
	}
}
