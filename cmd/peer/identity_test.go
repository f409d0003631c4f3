package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/superpeer-overlay/superpeer/superpeer"
)

func seedID(t *testing.T, text string) peer.ID {
	t.Helper()
	k, err := seedIdentity(text, 0)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestSeedIdentity_IsStable(t *testing.T) {
	// The manifests under deploy/ name this ID ahead: a change to the
	// derivation breaks every cluster recipe.
	const want = "12D3KooWCPCfyphAtk5qW4FmWup18e1gcBrJgNoUE9zhMCvinPVG"
	if got := seedID(t, "superpeer/peer-0"); got.String() != want {
		t.Errorf("seed superpeer/peer-0 gives %s, want %s", got, want)
	}
	if seedID(t, "superpeer/peer-0") == seedID(t, "superpeer/peer-1") {
		t.Error("two seeds give one ID")
	}
}

func TestPeerIdentity_SeedLeavesTheKeyFileAlone(t *testing.T) {
	path := filepath.Join(t.TempDir(), "peer.key")
	k, made, err := peerIdentity("bed/peer-3", path, 0)
	if err != nil || made {
		t.Fatalf("made %v, err %v", made, err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("a seeded identity wrote %s (%v)", path, err)
	}
	id, _ := peer.IDFromPrivateKey(k)
	if id != seedID(t, "bed/peer-3") {
		t.Error("peerIdentity's seeded key is not seedIdentity's")
	}
	// Without a seed it is the key file, made once and then kept.
	k1, made1, err := peerIdentity("", path, 0)
	if err != nil || !made1 {
		t.Fatalf("made %v, err %v", made1, err)
	}
	k2, made2, err := peerIdentity("", path, 0)
	if err != nil || made2 || !k1.Equals(k2) {
		t.Fatalf("second load: made %v, same %v, err %v", made2, k1.Equals(k2), err)
	}
}

func TestWithoutSelf(t *testing.T) {
	a, b := seedID(t, "a"), seedID(t, "b")
	rest, skipped := withoutSelf([]peer.AddrInfo{{ID: a}, {ID: b}}, a)
	if !skipped || len(rest) != 1 || rest[0].ID != b {
		t.Errorf("rest %v, skipped %v", rest, skipped)
	}
	rest, skipped = withoutSelf([]peer.AddrInfo{{ID: a}}, a)
	if !skipped || len(rest) != 0 {
		t.Errorf("only itself: rest %v, skipped %v", rest, skipped)
	}
	rest, skipped = withoutSelf([]peer.AddrInfo{{ID: b}}, a)
	if skipped || len(rest) != 1 {
		t.Errorf("not itself: rest %v, skipped %v", rest, skipped)
	}
}

func TestRunID(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"id", "--identity-seed", "superpeer/peer-0"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if got := strings.TrimSpace(out.String()); got != seedID(t, "superpeer/peer-0").String() {
		t.Errorf("peer id printed %q", got)
	}

	k, _, _ := crypto.GenerateEd25519Key(nil)
	b, _ := crypto.MarshalPrivateKey(k)
	path := filepath.Join(t.TempDir(), "peer.key")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	want, _ := peer.IDFromPrivateKey(k)
	out.Reset()
	if code := run([]string{"id", "--key", path}, &out, &errb); code != 0 || strings.TrimSpace(out.String()) != want.String() {
		t.Errorf("--key: exit %d, printed %q, want %s", code, out.String(), want)
	}
	for _, args := range [][]string{{"id"}, {"id", "--key", path, "--identity-seed", "x"}} {
		if code := run(args, io.Discard, io.Discard); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
	if code := run([]string{"id", "--key", filepath.Join(t.TempDir(), "missing.key")}, io.Discard, io.Discard); code != 1 {
		t.Errorf("missing key file: exit %d, want 1", code)
	}
}

// With --id-puzzle the identity solves the puzzle: a seeded one is the same
// every time, and `peer id` prints it; a key file is made solving it.
func TestPeerIdentity_SolvesThePuzzle(t *testing.T) {
	const c = 6
	k, _, err := peerIdentity("bed/peer-3", "", c)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := peer.IDFromPrivateKey(k)
	if !superpeer.SolvesPuzzle(id, c) || id == seedID(t, "bed/peer-3") {
		t.Fatalf("seeded identity %s has %d puzzle bits", id, superpeer.PuzzleBits(id))
	}
	again, _, _ := peerIdentity("bed/peer-3", "", c)
	if !again.Equals(k) {
		t.Error("the same seed and puzzle gave another identity")
	}
	var out bytes.Buffer
	if code := run([]string{"id", "--identity-seed", "bed/peer-3", "--id-puzzle", "6"}, &out, io.Discard); code != 0 || strings.TrimSpace(out.String()) != id.String() {
		t.Errorf("peer id --id-puzzle: exit %d, printed %q, want %s", code, out.String(), id)
	}
	if code := run([]string{"id", "--identity-seed", "x", "--id-puzzle", "99"}, io.Discard, io.Discard); code != 2 {
		t.Errorf("--id-puzzle 99: exit %d, want 2", code)
	}
	path := filepath.Join(t.TempDir(), "peer.key")
	made, fresh, err := peerIdentity("", path, c)
	if err != nil || !fresh {
		t.Fatalf("made %v, err %v", fresh, err)
	}
	if mid, _ := peer.IDFromPrivateKey(made); !superpeer.SolvesPuzzle(mid, c) {
		t.Errorf("a made key file has %d puzzle bits", superpeer.PuzzleBits(mid))
	}
}
