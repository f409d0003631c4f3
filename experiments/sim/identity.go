package sim

import (
	"fmt"
	"math/rand"
	"runtime"
	"sync"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/superpeer-overlay/superpeer/dht"
)

// Identity is peer i's ID in a swarm seeded with seed: the same seeded
// Ed25519 key experiments/swarm gives its peer i, so simulator and swarm
// runs on one seed name the same peers.
func Identity(seed int64, i int) (peer.ID, error) {
	r := rand.New(rand.NewSource(seed*1_000_003 + int64(i)))
	sk, _, err := crypto.GenerateEd25519Key(r)
	if err != nil {
		return "", err
	}
	return peer.IDFromPrivateKey(sk)
}

// IDStrings are ids as the simulator names peers (RepelOptions.IDs):
// string(peer.ID).
func IDStrings(ids []peer.ID) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = string(id)
	}
	return out
}

// Identities derives the IDs and kad keys (dht.KeyOf) of peers 0..n-1 on
// every core. Each peer's identity depends only on (seed, i), so the result
// does not depend on the scheduling. progress, if set, is called with the
// number done so far from time to time (from several goroutines).
func Identities(seed int64, n int, progress func(done int)) ([]peer.ID, []dht.Key, error) {
	ids := make([]peer.ID, n)
	keys := make([]dht.Key, n)
	workers := runtime.GOMAXPROCS(0)
	var wg sync.WaitGroup
	errs := make([]error, workers)
	const chunk = 4096
	var mu sync.Mutex
	next, done := 0, 0
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for {
				mu.Lock()
				lo := next
				next += chunk
				mu.Unlock()
				if lo >= n || errs[w] != nil {
					return
				}
				hi := min(lo+chunk, n)
				for i := lo; i < hi; i++ {
					id, err := Identity(seed, i)
					if err != nil {
						errs[w] = fmt.Errorf("sim: identity %d: %w", i, err)
						return
					}
					ids[i], keys[i] = id, dht.KeyOf(id)
				}
				if progress != nil {
					mu.Lock()
					done += hi - lo
					d := done
					mu.Unlock()
					progress(d)
				}
			}
		}(w)
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, nil, err
		}
	}
	return ids, keys, nil
}
