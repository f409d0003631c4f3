package repel

import (
	"errors"
	"testing"
	"time"

	"github.com/superpeer-overlay/superpeer/repel/pb"
	"github.com/superpeer-overlay/superpeer/vivaldi"
)

// TestSelector_GuardRefusesForgedTokens: live selectors, one token. A peer
// outside the selection signs a version of the token as its own at a
// higher epoch and sends it to every selector on the announce protocol.
// Without the guard that takes the token: its holder is fenced and the
// peers name the forger. With the guard the holder keeps it and counts the
// refusal, no peer names the forger once the holder has answered, and a
// hand-over whose certificate is not its giver's is dropped as bad-cert.
func TestSelector_GuardRefusesForgedTokens(t *testing.T) {
	for _, guard := range []bool{false, true} {
		cfg := LocalConfig()
		cfg.Tokens = 1
		cfg.Guard = guard
		ps := selectorNet(t, 4, 3, cfg)
		holder := -1
		// A mint gives way to any fresher version for DeadAfter
		// (TestNode_GuardMintYields): wait for a holder past that.
		waitUntil(t, 30*time.Second, "a holder past its mint's DeadAfter", func() bool {
			for i, s := range ps.sels {
				if tok, ok := s.Held(); ok && (!tok.minted() || time.Since(tok.HeldSince) > 2*cfg.DeadAfter) {
					holder = i
					return true
				}
			}
			return false
		})
		held, _ := ps.sels[holder].Held()
		liar := ps.hosts[3]
		me := string(liar.ID())
		key := liar.Peerstore().PrivKey(liar.ID())
		sign := func(tok Token) []byte {
			st, err := signToken(tok, key)
			if err != nil {
				t.Fatal(err)
			}
			return frameOf(t, st)
		}
		coord := vivaldi.Coord{Vec: make([]float64, 8)}
		forgery := sign(Token{ID: 0, Epoch: held.Epoch + 50, Holder: me, HolderKey: PeerKey(me), Coord: coord, Seq: 1})
		for i := range ps.sels {
			sendOn(t, liar, ps.hosts[i].ID(), testIDs.announce, forgery)
		}
		namesLiar := func() int {
			k := 0
			for _, s := range ps.sels {
				for _, tok := range s.LiveTokens() {
					if tok.Holder == me {
						k++
					}
				}
			}
			return k
		}
		if !guard {
			waitUntil(t, 10*time.Second, "the unguarded attack: the holder fenced, the peers naming the forger", func() bool {
				_, holds := ps.sels[holder].Held()
				return !holds && ps.sels[holder].Stats()[EventFenced.String()] >= 1 && namesLiar() == len(ps.sels)
			})
			continue
		}
		waitUntil(t, 10*time.Second, "the holder's refusal", func() bool {
			return ps.sels[holder].Stats()[EventUntraced.String()] >= 1
		})
		waitUntil(t, 10*time.Second, "every peer naming a selector's peer as the holder", func() bool {
			return namesLiar() == 0
		})
		if n := ps.sels[holder].Stats()[EventFenced.String()]; n != 0 {
			t.Fatalf("the guarded holder was fenced %d times", n)
		}
		// A hand-over in the holder's name with a certificate that is not
		// the holder's signature.
		now, _ := ps.sels[holder].Held()
		bad := Token{ID: 0, Epoch: now.Epoch + 60, Holder: me, HolderKey: PeerKey(me), Coord: coord, Seq: 2,
			Giver: string(ps.hosts[holder].ID()), GiverEpoch: now.Epoch, Cert: make([]byte, 64)}
		other := (holder + 1) % len(ps.sels)
		sendOn(t, liar, ps.hosts[other].ID(), testIDs.announce, sign(bad))
		waitUntil(t, 10*time.Second, "the false certificate dropped", func() bool {
			return ps.sels[other].Drops()[dropCert] == 1
		})
		for _, s := range ps.sels {
			for _, tok := range s.LiveTokens() {
				if tok.Epoch == bad.Epoch && tok.Holder == me {
					t.Fatal("a version with a false certificate was taken")
				}
			}
		}
	}
}

// The certificate binds the hand-over: its giver's key verifies it, and
// any other giver, holder or epoch does not.
func TestHandover_Certificate(t *testing.T) {
	ps := selectorNet(t, 2, 0, LocalConfig())
	a, b := ps.hosts[0], ps.hosts[1]
	offer := Token{ID: 3, Epoch: 8, Holder: string(b.ID()), HolderKey: PeerKey(string(b.ID())), Giver: string(a.ID()), GiverEpoch: 7,
		Coord: vivaldi.Coord{Vec: make([]float64, 8)}}
	signed, err := signHandover(offer, a.Peerstore().PrivKey(a.ID()))
	if err != nil {
		t.Fatal(err)
	}
	pub := a.Peerstore().PubKey // mocknet's keys are not in their peer IDs
	if err := verifyHandover(signed, pub); err != nil {
		t.Fatalf("the giver's own certificate refused: %v", err)
	}
	// A memory of verified certificates takes this one once it verifies,
	// and never one that does not.
	st, err := signToken(signed, b.Peerstore().PrivKey(b.ID()))
	if err != nil {
		t.Fatal(err)
	}
	var certs verifiedSigs
	if _, err := verifyTokenWith(st, signed, pub, nil, &certs); err != nil {
		t.Fatalf("the signed hand-over refused: %v", err)
	}
	if k, _ := certKey(signed); !certs.has(k) {
		t.Fatal("a verified certificate not remembered")
	}
	forged := signed
	forged.Cert = append([]byte(nil), signed.Cert...)
	forged.Cert[0] ^= 1
	stf, err := signToken(forged, b.Peerstore().PrivKey(b.ID()))
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := verifyTokenWith(stf, forged, pub, nil, &certs); !errors.Is(err, errBadCert) {
			t.Fatalf("a forged certificate: %v, want errBadCert", err)
		}
	}
	if k, _ := certKey(forged); certs.has(k) || len(certs.keys) != 1 {
		t.Fatalf("the forged certificate remembered (%d kept)", len(certs.keys))
	}
	for name, change := range map[string]func(*Token){
		"epoch":       func(t *Token) { t.Epoch++ },
		"giver epoch": func(t *Token) { t.GiverEpoch++ },
		"holder":      func(t *Token) { t.Holder = string(a.ID()) },
		"giver":       func(t *Token) { t.Giver = string(b.ID()) },
		"id":          func(t *Token) { t.ID++ },
		"no cert":     func(t *Token) { t.Cert = nil },
	} {
		tok := signed
		change(&tok)
		if err := verifyHandover(tok, pub); err == nil {
			t.Errorf("%s changed: the certificate still verifies", name)
		}
	}
	// On the wire: a certificate without a giver, or a giver without one,
	// does not decode.
	for name, m := range map[string]*pb.Token{
		"cert, no giver": {Holder: []byte(b.ID()), Coord: &pb.Coord{Vec: []float64{0}}, Cert: []byte{1}},
		"giver, no cert": {Holder: []byte(b.ID()), Coord: &pb.Coord{Vec: []float64{0}}, Giver: []byte(a.ID())},
	} {
		if _, err := tokenFromPB(m); err == nil || tokenReason(err) != dropCert {
			t.Errorf("%s: decoded (%v)", name, err)
		}
	}
	if tok, err := tokenFromPB(TokenToPB(signed)); err != nil || tok.Giver != signed.Giver || verifyHandover(tok, pub) != nil {
		t.Fatalf("a signed hand-over does not survive the wire: %v", err)
	}
}
