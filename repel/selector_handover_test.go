package repel

import (
	"fmt"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"

	"github.com/superpeer-overlay/superpeer/dht"
	"github.com/superpeer-overlay/superpeer/superpeer"
)

// A token minted far from its clients is handed over to one of them, with
// either dissemination: of 8 peers, the one XOR-nearest token 0's name —
// its minter — sits 50 ms (one way) from the other seven, which are close
// together. The token must move into the crowd, its new holder carrying the
// minter's hand-over certificate, every other peer must take that version
// (GossipSub's topic validator and the piggyback both check the
// certificate) and attach to the new holder, and nothing may be refused
// between honest peers.
func TestSelector_HandsOverIntoTheCrowd(t *testing.T) {
	for _, d := range []Dissemination{Piggyback, GossipSub} {
		t.Run(d.String(), func(t *testing.T) {
			cfg := LocalConfig()
			cfg.Tokens = 1
			ps := selectorNetWith(t, 8, 8, cfg, d)
			name := TokenKey(0)
			far := 0
			for i, h := range ps.hosts {
				if name.Closer(dht.KeyOf(h.ID()), dht.KeyOf(ps.hosts[far].ID())) {
					far = i
				}
			}
			for i, h := range ps.hosts {
				if i == far {
					continue
				}
				for _, l := range ps.mn.LinksBetweenPeers(ps.hosts[far].ID(), h.ID()) {
					l.SetOptions(mocknet.LinkOptions{Latency: 50 * time.Millisecond})
				}
			}
			minter := ps.hosts[far].ID()
			var holder *Selector
			waitFor(t, 60*time.Second, "the token handed over into the crowd, everyone attached", func() error {
				holder = nil
				for _, s := range ps.sels {
					if _, ok := s.Held(); ok {
						if holder != nil {
							return fmt.Errorf("two holders: %s, %s", holder.node.ID(), s.node.ID())
						}
						holder = s
					}
				}
				switch {
				case holder == nil:
					return fmt.Errorf("no holder")
				case holder.node.ID() == minter:
					return fmt.Errorf("still at its minter")
				case holder.Role() != superpeer.Superpeer:
					return fmt.Errorf("holder %s not settled", holder.node.ID())
				}
				for _, s := range ps.sels {
					if s != holder && s.Superpeer() != holder.node.ID() {
						return fmt.Errorf("%s attached to %q", s.node.ID(), s.Superpeer())
					}
				}
				return nil
			})
			tok, _ := holder.Held()
			if peer.ID(tok.Giver) == "" || len(tok.Cert) == 0 {
				t.Errorf("the holder's version has no hand-over certificate: giver %q, %d bytes", tok.Giver, len(tok.Cert))
			}
			minted, accepted := uint64(0), uint64(0)
			for _, s := range ps.sels {
				st := s.Stats()
				minted += st[EventMinted.String()]
				accepted += st[EventAccepted.String()]
				if s.node.ID() == minter && st[EventMinted.String()] == 0 {
					t.Errorf("the peer nearest the token's name did not mint it (stats %v)", st)
				}
				if d := s.Drops(); len(d) > 0 {
					t.Errorf("%s dropped messages between honest peers: %v (stats %v)", s.node.ID(), d, stepErrors(st))
				}
			}
			if minted != 1 || accepted == 0 {
				t.Errorf("%d mints, %d hand-overs taken", minted, accepted)
			}
			t.Logf("held by %s after %d hand-overs", holder.node.ID(), accepted)
		})
	}
}
