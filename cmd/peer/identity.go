package main

import (
	"crypto/ed25519"
	"crypto/sha256"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"os"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/superpeer-overlay/superpeer/superpeer"
)

func init() {
	commands["id"] = command{
		summary: "print the peer ID of an --identity-seed or a --key file (to write a bootstrap multiaddr ahead)",
		run:     runID,
	}
}

// seedIdentity is the Ed25519 key derived from text: the SHA-256 of the
// text is the key's seed, so the same text always gives the same peer ID.
// It lets a cluster name its bootstrap peers' multiaddrs before they run
// (`peer run --identity-seed bed/peer-0`); whoever knows the text holds the
// key, so it is for test beds, not for identities worth keeping.
//
// With a puzzle of c bits (--id-puzzle) the key is the first that solves
// it (superpeer.PuzzleKey) among the keys drawn from a ChaCha8 stream
// seeded with that hash.
func seedIdentity(text string, puzzle int) (crypto.PrivKey, error) {
	sum := sha256.Sum256([]byte(text))
	if puzzle == 0 {
		return crypto.UnmarshalEd25519PrivateKey(ed25519.NewKeyFromSeed(sum[:]))
	}
	key, _, err := superpeer.PuzzleKey(mrand.NewChaCha8(sum), puzzle)
	return key, err
}

// peerIdentity is `peer run`'s identity: derived from seed if it is not
// empty, else read from the key file at path (made there if missing, and
// then made is true); made or derived, it solves a puzzle of that many
// bits (a key file kept from before may not).
func peerIdentity(seed, path string, puzzle int) (key crypto.PrivKey, made bool, err error) {
	if seed != "" {
		key, err = seedIdentity(seed, puzzle)
		return key, false, err
	}
	return loadIdentity(path, puzzle)
}

// readIdentity reads a key file as loadIdentity writes it, without making
// one.
func readIdentity(path string) (crypto.PrivKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("identity key %s: %w", path, err)
	}
	k, err := crypto.UnmarshalPrivateKey(b)
	if err != nil {
		return nil, fmt.Errorf("identity key %s: %w", path, err)
	}
	return k, nil
}

// withoutSelf is the bootstrap peers other than self. Every pod of a
// cluster can then run one command line naming the first pods as bootstrap
// peers: a bootstrap peer skips itself, and one whose only bootstrap peer
// is itself starts the network.
func withoutSelf(infos []peer.AddrInfo, self peer.ID) (rest []peer.AddrInfo, skipped bool) {
	for _, ai := range infos {
		if ai.ID == self {
			skipped = true
			continue
		}
		rest = append(rest, ai)
	}
	return rest, skipped
}

// runID is `peer id`: the peer ID that `peer run` with the same
// --identity-seed or --key would have.
func runID(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("id", stderr)
	seed := fs.String("identity-seed", "", "the `text` that 'peer run --identity-seed' derives the identity from")
	puzzle := fs.Int("id-puzzle", 0, "the --id-puzzle that 'peer run --identity-seed' derives it under")
	keyPath := fs.String("key", "", "a key `file` as 'peer run --key' keeps it (not made if missing)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	var key crypto.PrivKey
	var err error
	switch {
	case (*seed == "") == (*keyPath == ""):
		return fmt.Errorf("%w: give one of --identity-seed and --key", errUsage)
	case *seed != "":
		if *puzzle < 0 || *puzzle > superpeer.MaxPuzzleBits {
			return fmt.Errorf("%w: --id-puzzle %d not in [0, %d]", errUsage, *puzzle, superpeer.MaxPuzzleBits)
		}
		key, err = seedIdentity(*seed, *puzzle)
	default:
		key, err = readIdentity(*keyPath)
	}
	if err != nil {
		return err
	}
	id, err := peer.IDFromPrivateKey(key)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, id)
	return nil
}
