package repel

import (
	"errors"
	"time"

	lpnet "github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	"github.com/superpeer-overlay/superpeer/repel/pb"
)

// piggyback is the selector's side of the Vivaldi exchanges
// (vivaldi.Piggyback): it runs on the exchanges' goroutines, reads the
// gossip table and hands what it receives to the loop without waiting, so
// that a reply, and the RTT its caller times, is never held up by it.
type piggyback struct{ s *Selector }

func (p piggyback) Request(to peer.ID) []byte {
	b := p.s.table.request()
	p.s.countGossip(b)
	return b
}

func (p piggyback) Reply(from peer.ID, req []byte) []byte {
	var known []*pb.Version
	if len(req) > 0 {
		var ok bool
		if known, ok = p.s.takePiggyback(from, req, "request"); !ok {
			return nil
		}
	}
	b := p.s.table.reply(known)
	p.s.countGossip(b)
	return b
}

func (p piggyback) Deliver(from peer.ID, b []byte) { p.s.takePiggyback(from, b, "reply") }

// takePiggyback decodes a piggyback that came in a request or a reply (where),
// hands its versions to the loop and returns what it says its sender
// knows; a bad one is counted and ok is false.
func (s *Selector) takePiggyback(from peer.ID, b []byte, where string) (known []*pb.Version, ok bool) {
	known, toks, reason, err := decodeGossip(b, s.opts.Config.maxTokens())
	if err != nil {
		s.drops.Add(reason, 1)
		log.Debugw("repel: bad gossip in a "+where, "from", from, "reason", reason, "err", err)
		return nil, false
	}
	s.handOver(toks, "")
	return known, true
}

// countGossip counts a piggyback sent.
func (s *Selector) countGossip(b []byte) {
	if len(b) > 0 {
		s.stats.Add(statGossipFrames, 1)
		s.stats.Add(statGossipBytes, uint64(len(b)))
	}
}

// handOver gives received versions to the loop if it has room; if not,
// they are dropped and counted (a later exchange brings them again).
func (s *Selector) handOver(toks []signedToken, direct peer.ID) {
	if len(toks) == 0 {
		return
	}
	select {
	case s.inbox <- &input{gossip: toks, direct: direct}:
	default:
		s.stats.Add(statGossipBusy, 1)
	}
}

// takeGossip returns the received versions that are news to the model
// (Node.news: what it would take, go back to, or refuse as untraced),
// once their signatures and hand-over certificates verify. A direct
// announcement comes from its holder (the connection says so) and goes to
// the model with its digest; a relayed one with the last digest its
// holder sent this peer of that version. The caller steps the model with
// each and then keeps in the gossip table, to relay, what the model took
// (keepGossip), so that this peer relays only versions it trusts. Loop
// only.
func (s *Selector) takeGossip(now time.Time, toks []signedToken, direct peer.ID) []signedToken {
	var out []signedToken
	for _, g := range toks {
		t := g.tok
		if s.model.retired(t) {
			// Sent under an older count that had this token.
			s.stats.Add(statGossipRetired, 1)
			continue
		}
		if lim := s.model.limit(t.Count); int(t.ID) >= lim {
			s.drops.Add(dropOutOfRange, 1)
			continue
		} else if int(t.ID) >= len(s.heard) {
			// A fresher, larger count: make room for its tokens now; the
			// model takes the count when it steps t.
			s.fitTokens(lim)
		}
		if direct == "" {
			if !s.model.news(now, t) || !s.verified(g) {
				continue
			}
			s.stats.Add(statGossipNews, 1)
			if d := s.digests[t.ID]; d.sameVersion(t) {
				t.Digest = copyDigest(d.Digest)
			}
			out = append(out, signedToken{tok: t, pb: g.pb})
			continue
		}
		if peer.ID(t.Holder) != direct {
			s.drops.Add(dropNotHolder, 1)
			continue
		}
		if !s.verified(g) {
			continue
		}
		if len(t.Digest) > 0 {
			// The holder's own word on its clients, for this version.
			s.digests[t.ID] = copyToken(t)
		}
		out = append(out, g)
	}
	return out
}

// keepGossip puts g in the gossip table, to relay, if the model now knows
// g's version as the freshest of its token (it took it or went back to
// it). A direct announcement only as a new version: heartbeats spread at
// their holder's GossipEvery. Loop only.
func (s *Selector) keepGossip(g signedToken, direct bool) {
	if s.model.knows(g.tok) && (!direct || s.table.wantsVersion(g.tok)) {
		s.table.put(g.tok, g.pb)
	}
}

// verified checks g's signature and hand-over certificate, counting the
// check and a refusal.
func (s *Selector) verified(g signedToken) bool {
	known, err := verifyTokenWith(g.pb, g.tok, s.node.Host().Peerstore().PubKey, &s.sigs, &s.certs)
	if known {
		s.stats.Add(statGossipSigKnown, 1)
		return true
	}
	s.stats.Add(statGossipVerified, 1)
	if err != nil {
		reason := dropSignature
		if errors.Is(err, errBadCert) {
			reason = dropCert
		}
		s.drops.Add(reason, 1)
		log.Debugw("repel: token refused", "holder", peer.ID(g.tok.Holder), "reason", reason, "err", err)
		return false
	}
	return true
}

// announce signs this holder's announcement t, puts it in the gossip
// table to spread if it is a new version or GossipEvery has passed since
// the last, and sends it with its digest to the other live holders. Loop
// only.
func (s *Selector) announce(now time.Time, t Token) {
	st, err := signToken(t, s.key)
	if err != nil {
		log.Warnw("repel: cannot sign own announcement", "err", err)
		return
	}
	// A holder that refused a rival spreads that at once (Token.Rival).
	if !t.sameVersion(s.gossiped) || t.Rival != s.gossiped.Rival || now.Sub(s.gossiped.Issued) >= s.opts.GossipEvery {
		s.table.offer(t, st)
		s.gossiped = Token{ID: t.ID, Epoch: t.Epoch, HolderKey: t.HolderKey, Issued: t.Issued, Rival: t.Rival}
	}
	if proto.Size(st) > maxAnnounceSize {
		return
	}
	self := string(s.node.ID())
	for _, o := range s.model.liveTokens(now) {
		if o.Holder == self || o.ID == t.ID {
			continue
		}
		s.wg.Add(1)
		go func(to peer.ID) { defer s.wg.Done(); s.sendAnnounce(to, st) }(peer.ID(o.Holder))
	}
}

// sendAnnounce sends one signed announcement, with its digest, to another
// holder on a stream of its own, unanswered.
func (s *Selector) sendAnnounce(to peer.ID, st *pb.SignedToken) {
	s.sendFrame(to, s.ids.announce, st, statAnnounceLost, statAnnounceSent, statAnnounceBytes)
}

// handleAnnounce reads a holder's direct announcement and hands it to the
// loop; one that does not decode, or whose token is not the sender's, is
// counted and the stream reset.
func (s *Selector) handleAnnounce(str lpnet.Stream) {
	defer str.Close()
	_ = str.SetDeadline(time.Now().Add(s.streamTimeout()))
	from := str.Conn().RemotePeer()
	var f pb.SignedToken
	if !s.readIncoming(str, maxAnnounceSize, &f, statAnnounceLost, "announce") {
		return
	}
	t, reason, err := decodeSigned(&f, s.opts.Config.maxTokens())
	if err == nil && peer.ID(t.Holder) != from {
		reason, err = dropNotHolder, errNotHolder
	}
	if err != nil {
		s.drops.Add(reason, 1)
		log.Debugw("repel: bad announcement", "from", from, "reason", reason, "err", err)
		_ = str.Reset()
		return
	}
	s.stats.Add(statAnnounceRecv, 1)
	s.handOver([]signedToken{{tok: t, pb: &f}}, from)
}

// KnownVersions is, with Piggyback dissemination, the freshest version of
// each token this peer has heard of, digest-less, with the heartbeat Seq
// and when its holder issued it (nil with GossipSub).
func (s *Selector) KnownVersions() []Token {
	if s.table == nil {
		return nil
	}
	return s.table.versions()
}
