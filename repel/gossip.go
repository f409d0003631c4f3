package repel

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	"github.com/superpeer-overlay/superpeer/repel/pb"
	"github.com/superpeer-overlay/superpeer/vivaldi"
)

// Dissemination is how token announcements travel (WithDissemination).
type Dissemination uint8

const (
	// Piggyback, the default: every announcement is signed by its holder
	// and rides on the Vivaldi exchanges every peer makes anyway
	// (vivaldi.Piggyback), as memberlist's broadcasts ride on its probes. A
	// request says which version of each token its sender knows and
	// carries the versions it learned lately (each in GossipPush requests);
	// the reply carries every version fresher than the request said. A
	// holder also sends each announcement, with its client digest, to the
	// other live holders directly (the announce protocol): the digests are for
	// holders only. No mesh, no connection, stream or goroutine of its own
	// on a peer that holds no token.
	Piggyback Dissemination = iota
	// GossipSub: announcements are published on the tokens topic
	// (<prefix>/repel/tokens/1); the dht.Node must have a pubsub router
	// (dht.WithGossipSub, or the application's: dht.WithPubSub). For
	// applications that run it anyway.
	GossipSub
)

func (d Dissemination) String() string {
	switch d {
	case Piggyback:
		return "piggyback"
	case GossipSub:
		return "gossipsub"
	}
	return fmt.Sprintf("Dissemination(%d)", uint8(d))
}

// ParseDissemination is the inverse of String.
func ParseDissemination(s string) (Dissemination, error) {
	switch s {
	case "piggyback":
		return Piggyback, nil
	case "gossipsub":
		return GossipSub, nil
	}
	return 0, fmt.Errorf("repel: unknown dissemination %q (piggyback, gossipsub)", s)
}

// Drop reasons of the piggyback and the announce protocol.
const (
	dropGossip    = "bad-gossip"    // a gossip piggyback that does not decode, too many entries, a bad version
	dropSignature = "bad-signature" // a token version whose holder's signature does not verify
)

// holderKeyPrefix is how much of a holder's kad key a Version names: the
// order of two versions of one epoch is decided by it (a tie needs two
// holders whose keys share 8 bytes).
const holderKeyPrefix = 8

// errBadSignature is a signed token version whose signature is not its
// holder's.
var errBadSignature = errors.New("repel: token signature does not verify")

// errBadCert is a hand-over whose certificate is missing, oversized or
// not its giver's.
var errBadCert = errors.New("repel: hand-over certificate does not verify")

// maxCert bounds a hand-over certificate: a signature (Ed25519's is 64
// bytes, RSA-4096's 512).
const maxCert = 1024

// handoverDomain prefixes what a giver signs, so that a hand-over
// signature can never pass for another of the peer's signatures.
const handoverDomain = "superpeer/repel/handover:"

// handoverBytes is what the giver of t signs: t's ID, epoch and holder
// and the giver's own version (Giver, GiverEpoch).
func handoverBytes(t Token) ([]byte, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(&pb.Handover{
		Id: t.ID, Epoch: t.Epoch, Holder: []byte(t.Holder), Giver: []byte(t.Giver), GiverEpoch: t.GiverEpoch,
	})
	if err != nil {
		return nil, err
	}
	return append([]byte(handoverDomain), b...), nil
}

// signHandover is t, an offer of this peer's token (t.Giver is this
// peer), with its certificate, signed by key.
func signHandover(t Token, key crypto.PrivKey) (Token, error) {
	b, err := handoverBytes(t)
	if err != nil {
		return t, err
	}
	if t.Cert, err = key.Sign(b); err != nil {
		return t, err
	}
	return t, nil
}

// publicKey is the public key of id: pub's (nil, or nil for id: the key
// the peer ID holds, as for Ed25519 IDs).
func publicKey(id peer.ID, pub func(peer.ID) crypto.PubKey) (crypto.PubKey, error) {
	if pub != nil {
		if k := pub(id); k != nil {
			return k, nil
		}
	}
	return id.ExtractPublicKey()
}

// verifyHandover checks t's certificate: none for a mint, else its
// giver's signature over handoverBytes(t).
func verifyHandover(t Token, pub func(peer.ID) crypto.PubKey) error {
	if t.Giver == "" {
		if len(t.Cert) > 0 {
			return fmt.Errorf("%w: a certificate without a giver", errBadCert)
		}
		return nil
	}
	k, err := publicKey(peer.ID(t.Giver), pub)
	if err != nil {
		return fmt.Errorf("%w: no public key for giver %s: %v", errBadCert, peer.ID(t.Giver), err)
	}
	b, err := handoverBytes(t)
	if err != nil {
		return err
	}
	if ok, err := k.Verify(b, t.Cert); err != nil || !ok {
		return errBadCert
	}
	return nil
}

// signedBytes is what a holder signs of t: its deterministic encoding
// without the digest.
func signedBytes(m *pb.Token) ([]byte, error) {
	c := proto.Clone(m).(*pb.Token)
	c.Digest = nil
	return proto.MarshalOptions{Deterministic: true}.Marshal(c)
}

// SignToken is t, digest included, signed by key as its holder's: the
// frame of the announce protocol and of a gossip piggyback. A peer can sign
// only versions naming itself as the holder that others will take.
func SignToken(t Token, key crypto.PrivKey) (*pb.SignedToken, error) { return signToken(t, key) }

// signToken is t, digest included, signed by its holder's key.
func signToken(t Token, key crypto.PrivKey) (*pb.SignedToken, error) {
	m := TokenToPB(t)
	b, err := signedBytes(m)
	if err != nil {
		return nil, err
	}
	sig, err := key.Sign(b)
	if err != nil {
		return nil, err
	}
	return &pb.SignedToken{Token: m, Signature: sig}, nil
}

// verifyToken checks that st is signed by the holder it names, and its
// hand-over certificate by its giver (verifyHandover), whose public keys
// pub gives (nil: the key the peer ID holds, as for Ed25519 IDs); t has
// tokenFromPB's checks.
func verifyToken(st *pb.SignedToken, t Token, pub func(peer.ID) crypto.PubKey) error {
	_, err := verifyTokenWith(st, t, pub, nil, nil)
	return err
}

// verifyTokenWith is verifyToken with memories: a version sigs holds as
// verified (its signed bytes and signature, sigKey) is not checked again —
// known says so — nor a hand-over certificate certs holds (certKey); what
// verifies is added to them. nil memories keep nothing.
func verifyTokenWith(st *pb.SignedToken, t Token, pub func(peer.ID) crypto.PubKey, sigs, certs *verifiedSigs) (known bool, err error) {
	b, err := signedBytes(st.GetToken())
	if err != nil {
		return false, err
	}
	key := lpKey(b, st.GetSignature())
	if sigs != nil && sigs.has(key) {
		return true, nil
	}
	id := peer.ID(t.Holder)
	k, err := publicKey(id, pub)
	if err != nil {
		return false, fmt.Errorf("%w: no public key for %s: %v", errBadSignature, id, err)
	}
	if ok, err := k.Verify(b, st.GetSignature()); err != nil || !ok {
		return false, errBadSignature
	}
	if err := verifyCert(t, pub, certs); err != nil {
		return false, err
	}
	if sigs != nil {
		sigs.add(key)
	}
	return false, nil
}

// verifyCert is verifyHandover, but a certificate certs holds as verified
// is not checked again, and one that verifies is added (nil: none kept).
func verifyCert(t Token, pub func(peer.ID) crypto.PubKey, certs *verifiedSigs) error {
	if certs == nil || t.Giver == "" {
		return verifyHandover(t, pub)
	}
	ck, err := certKey(t)
	if err != nil {
		return verifyHandover(t, pub)
	}
	if certs.has(ck) {
		return nil
	}
	if err := verifyHandover(t, pub); err != nil {
		return err
	}
	certs.add(ck)
	return nil
}

// verKey names a checked signature: the SHA-256 of what was signed and the
// signature (lpKey).
type verKey [sha256.Size]byte

// lpKey is the verKey of a followed by b, a length-prefixed so that no two
// splits share a key.
func lpKey(a, b []byte) verKey {
	h := sha256.New()
	var n [binary.MaxVarintLen64]byte
	h.Write(n[:binary.PutUvarint(n[:], uint64(len(a)))])
	h.Write(a)
	h.Write(b)
	var k verKey
	h.Sum(k[:0])
	return k
}

// certKey names what verifyHandover checks of a handed-over t (one with a
// Giver): the bytes its giver signed and the certificate. Every heartbeat
// of a handed-over token carries the same one.
func certKey(t Token) (verKey, error) {
	b, err := handoverBytes(t)
	if err != nil {
		return verKey{}, err
	}
	return lpKey(b, t.Cert), nil
}

// verifiedSigs remembers the last signed versions whose signature and
// hand-over certificate verified (sigKey), so that a version heard again —
// every exchange with its holder carries it — costs no second Ed25519
// verification: at 2 000 live peers these took a fifth of the process's
// CPU. Only successes are kept, so a bad frame is checked, refused and
// counted every time. It keeps Limit keys (0: defaultVerifiedSigs), the
// oldest forgotten first. Not safe for concurrent use.
type verifiedSigs struct {
	Limit int
	keys  map[verKey]struct{}
	order []verKey // oldest first
}

// defaultVerifiedSigs bounds a verifiedSigs without a Limit: a few
// versions of each of up to a hundred tokens.
const defaultVerifiedSigs = 512

// verifiedSigsFor is the Limit for S tokens: the versions a peer hears
// again are each token's latest and the one or two before it that relays
// still carry (a forgotten one is only verified again).
func verifiedSigsFor(S int) int { return max(16, 4*S) }

func (v *verifiedSigs) has(k verKey) bool {
	_, ok := v.keys[k]
	return ok
}

func (v *verifiedSigs) add(k verKey) {
	if _, ok := v.keys[k]; ok {
		return
	}
	limit := v.Limit
	if limit <= 0 {
		limit = defaultVerifiedSigs
	}
	if v.keys == nil {
		v.keys = make(map[verKey]struct{})
	}
	for len(v.order) >= limit {
		delete(v.keys, v.order[0])
		v.order = v.order[1:]
	}
	v.order = append(v.order, k)
	v.keys[k] = struct{}{}
}

// signedToken is one decoded, not yet verified, version of a gossip frame
// or a direct announcement.
type signedToken struct {
	tok Token
	pb  *pb.SignedToken
}

// decodeGossip parses a piggyback for S tokens: at most S versions known
// and S tokens, each token decoding (tokenFromPB) with its ID in range and
// no digest. A bad frame is refused whole; the reason names the drop
// counter. The signatures are not checked here (verifyToken).
func decodeGossip(b []byte, S int) (known []*pb.Version, toks []signedToken, reason string, err error) {
	if len(b) > vivaldi.MaxPiggyback {
		return nil, nil, dropGossip, fmt.Errorf("repel: gossip of %d bytes over the cap %d", len(b), vivaldi.MaxPiggyback)
	}
	var g pb.Gossip
	if err := proto.Unmarshal(b, &g); err != nil {
		return nil, nil, dropGossip, err
	}
	if len(g.Known) > S || len(g.Tokens) > S {
		return nil, nil, dropGossip, fmt.Errorf("repel: gossip names %d and carries %d tokens of %d", len(g.Known), len(g.Tokens), S)
	}
	for _, v := range g.Known {
		if v.GetId() >= uint32(S) || len(v.GetHolderKey()) > holderKeyPrefix {
			return nil, nil, dropGossip, fmt.Errorf("repel: gossip names token %d of %d, holder key of %d bytes", v.GetId(), S, len(v.GetHolderKey()))
		}
	}
	for _, st := range g.Tokens {
		t, reason, err := decodeSigned(st, S)
		if err != nil {
			return nil, nil, reason, err
		}
		if len(t.Digest) > 0 {
			return nil, nil, dropGossip, errors.New("repel: a gossiped token carries a digest")
		}
		toks = append(toks, signedToken{tok: t, pb: st})
	}
	return g.Known, toks, "", nil
}

// decodeSigned checks one signed version for S tokens (the signature
// aside): tokenFromPB, the ID in range. The reason names the drop counter.
func decodeSigned(f *pb.SignedToken, S int) (Token, string, error) {
	t, err := tokenFromPB(f.GetToken())
	if err != nil {
		return Token{}, tokenReason(err), err
	}
	if t.ID >= uint32(S) {
		return Token{}, dropOutOfRange, fmt.Errorf("%w: %d ≥ %d", errTokenOutOfRange, t.ID, S)
	}
	return t, "", nil
}

// fresher reports whether a is news against b: a later version, or the same
// version with a later heartbeat.
func fresher(a, b Token) bool {
	return a.Beats(b) || a.sameVersion(b) && a.Seq > b.Seq
}

// versionOf is what a Version names of t.
func versionOf(t Token) *pb.Version {
	return &pb.Version{Id: t.ID, Epoch: t.Epoch, HolderKey: t.HolderKey[:holderKeyPrefix], Seq: t.Seq}
}

// newerThan reports whether t is news against v (nil: v knows nothing).
func newerThan(t Token, v *pb.Version) bool {
	if v == nil {
		return true
	}
	if t.Epoch != v.Epoch {
		return t.Epoch > v.Epoch
	}
	if c := bytes.Compare(t.HolderKey[:holderKeyPrefix], v.HolderKey); c != 0 {
		return c > 0
	}
	return t.Seq > v.Seq
}

// gossipTable is the piggyback's state: the freshest signed version of
// every token this peer has heard of, digest-less, and how many more
// requests carry each. Safe for concurrent use: the Vivaldi exchanges read
// it, the selector's loop writes it.
type gossipTable struct {
	mu      sync.Mutex
	push    int
	entries []gossipEntry
}

type gossipEntry struct {
	known  bool
	tok    Token
	st     *pb.SignedToken // digest-less
	pushes int             // requests that will still carry it
}

func newGossipTable(S, push int) *gossipTable {
	return &gossipTable{push: push, entries: make([]gossipEntry, S)}
}

// resize makes the table hold tokens [0, S) (Config.Fraction): it forgets
// the tokens a smaller count retired.
func (g *gossipTable) resize(S int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if S <= len(g.entries) {
		clear(g.entries[S:])
		g.entries = g.entries[:S]
		return
	}
	g.entries = append(g.entries, make([]gossipEntry, S-len(g.entries))...)
}

// wantsVersion reports whether t is a version the table does not know
// (a later heartbeat of a known version is not).
func (g *gossipTable) wantsVersion(t Token) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if int(t.ID) >= len(g.entries) {
		return false
	}
	e := g.entries[t.ID]
	return !e.known || !e.tok.sameVersion(t)
}

// offer keeps st (the version t, verified) if it is news, to be pushed on
// the next requests; it reports whether it was.
func (g *gossipTable) offer(t Token, st *pb.SignedToken) bool {
	return g.store(t, st, func(e gossipEntry) bool { return !e.known || fresher(t, e.tok) })
}

// put makes t (verified, with its signed form st) the table's version of
// its token, to be pushed on the next requests, unless the table holds
// that version already with as late a heartbeat: the caller (the
// selector's loop) puts what its model took, which may be older than
// what the table held (a version the model went back to).
func (g *gossipTable) put(t Token, st *pb.SignedToken) {
	g.store(t, st, func(e gossipEntry) bool { return !e.known || !e.tok.sameVersion(t) || t.Seq > e.tok.Seq })
}

// store makes t, digest-less, the table's entry of its token if take
// says so of the entry held, and reports whether it did.
func (g *gossipTable) store(t Token, st *pb.SignedToken, take func(gossipEntry) bool) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if int(t.ID) >= len(g.entries) || !take(g.entries[t.ID]) {
		return false
	}
	if len(st.GetToken().GetDigest()) > 0 {
		c := proto.Clone(st).(*pb.SignedToken)
		c.Token.Digest = nil
		st = c
	}
	t.Digest = nil
	g.entries[t.ID] = gossipEntry{known: true, tok: t, st: st, pushes: g.push}
	return true
}

// request is the piggyback of a request: what this peer knows, and the
// versions it is still pushing.
func (g *gossipTable) request() []byte {
	g.mu.Lock()
	var m pb.Gossip
	for i := range g.entries {
		e := &g.entries[i]
		if !e.known {
			continue
		}
		m.Known = append(m.Known, versionOf(e.tok))
		if e.pushes > 0 {
			e.pushes--
			m.Tokens = append(m.Tokens, e.st)
		}
	}
	g.mu.Unlock()
	return marshalGossip(&m)
}

// reply is the piggyback of the reply to a request that said it knows
// known: every version fresher.
func (g *gossipTable) reply(known []*pb.Version) []byte {
	by := make(map[uint32]*pb.Version, len(known))
	for _, v := range known {
		by[v.Id] = v
	}
	g.mu.Lock()
	var m pb.Gossip
	for i := range g.entries {
		if e := &g.entries[i]; e.known && newerThan(e.tok, by[uint32(i)]) {
			m.Tokens = append(m.Tokens, e.st)
		}
	}
	g.mu.Unlock()
	return marshalGossip(&m)
}

// marshalGossip encodes m within vivaldi.MaxPiggyback, leaving out the
// last tokens if it must (later exchanges bring them); nil if empty.
func marshalGossip(m *pb.Gossip) []byte {
	if len(m.Known) == 0 && len(m.Tokens) == 0 {
		return nil
	}
	for {
		b, err := proto.Marshal(m)
		if err == nil && len(b) <= vivaldi.MaxPiggyback {
			return b
		}
		if len(m.Tokens) == 0 {
			return nil
		}
		m.Tokens = m.Tokens[:len(m.Tokens)-1]
	}
}

// versions is the table's tokens, digest-less, with their Seq and Issued.
func (g *gossipTable) versions() []Token {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []Token
	for _, e := range g.entries {
		if e.known {
			out = append(out, copyToken(e.tok))
		}
	}
	return out
}
