package repel

import (
	"bytes"
	"crypto/sha256"
	"math"
	"strconv"
	"time"

	"github.com/superpeer-overlay/superpeer/dht"
	"github.com/superpeer-overlay/superpeer/vivaldi"
)

// Key is the DHT's key (dht.Key): a point of the 256-bit kad key space,
// distance XOR. One type serves the DHT, the prefix method and the tokens.
type Key = dht.Key

// PeerKey is the kad-dht key of a peer ID given as its raw bytes (the string
// form of a libp2p peer.ID): dht.KeyOf of that ID.
func PeerKey(id string) Key { return sha256.Sum256([]byte(id)) }

// TokenKey is the name of token i in the key space, sha256("repel-token/"+i).
// The XOR-closest live peer to it mints the token, so every peer that sees
// the same live set picks the same minter without talking to anyone.
func TokenKey(i uint32) Key {
	return sha256.Sum256([]byte("repel-token/" + strconv.FormatUint(uint64(i), 10)))
}

// Token is one version of a repelling token. A version is named by (ID,
// Epoch, HolderKey); every move and every re-mint makes a new version with a
// higher epoch, so versions are totally ordered per ID (see Beats).
type Token struct {
	// ID names the token, in [0, S).
	ID uint32
	// Epoch grows by at least one with every move and every re-mint.
	Epoch uint64
	// Holder is the peer that holds this version (a peer ID's bytes).
	Holder string
	// HolderKey is the holder's kad key; it breaks ties between two versions
	// of one epoch (two peers that minted at once).
	HolderKey Key
	// Coord is the holder's Vivaldi coordinate when it last announced: the
	// token's position in the force field.
	Coord vivaldi.Coord
	// HeldSince is when the holder took this version, on the holder's clock;
	// it is informational (settling is judged by the holder alone).
	HeldSince time.Time
	// Moves counts the token's recent moves: one more per move, one less
	// per Config.CoolingRest at rest; it sets how much gain the next move
	// needs (see Config.CoolingMoves). A re-mint starts it at 0.
	Moves uint32
	// Digest summarises the clients attached to the holder: at most
	// Config.DigestSize of them, each weighted by how many clients it stands
	// for. Other holders weigh a move against every token's digest, so a
	// token sees crowds of clients served from afar that none of its own
	// neighbours is in.
	Digest []Sample
	// Surveyed marks a version offered by a settled holder whose survey
	// measured the new holder a better place for its clients
	// (Config.SurveyInterval): the new holder takes it settled.
	Surveyed bool
	// Seq is the holder's heartbeat within this version: one more with
	// every announcement. A node takes an announcement of the version it
	// knows as news that the holder lives only if Seq is higher, so a
	// copy relayed late (gossip) does not keep a dead holder's token alive.
	Seq uint64
	// Issued is when the holder made announcement Seq, on its clock; it is
	// informational (the age of what a peer knows).
	Issued time.Time
	// Count is the holder's census under Config.Fraction (zero without
	// one): the count it holds and its report as of this announcement.
	Count Count
	// Giver and GiverEpoch say how this version came to be. A hand-over
	// names the peer that gave the token and the epoch of the version it
	// held; Cert is then the giver's signature over the hand-over (the
	// adapter signs and checks it; the model only carries it), so no peer
	// but the holder of a version can make its successor. A mint has no
	// Giver and no Cert, and GiverEpoch is the epoch of the version the
	// minter found silent (0: none).
	Giver      string
	GiverEpoch uint64
	Cert       []byte
	// Rival is, in a holder's announcement, the highest epoch of a version
	// of its token it refused as untraceable (0: none): the holder has
	// heard of that rival and still holds. Peers that took the rival over
	// this version go back to it (see Node.observe).
	Rival uint64
}

// minted reports whether t is a mint: no giver, one epoch above the
// version its minter found silent.
func (t Token) minted() bool { return t.Giver == "" && t.Epoch == t.GiverEpoch+1 }

// handedFrom reports whether t is the hand-over of version o by its holder.
func (t Token) handedFrom(o Token) bool {
	return t.Giver != "" && t.Giver == o.Holder && t.GiverEpoch == o.Epoch
}

// Count is a node's census as a token version carries it: the agreed token
// count S (and the version that set it) the sender holds and, in a holder's
// announcements, its report — the peers it accounts for (itself and its
// attached clients) for a 1/S share of the network, its report number and
// the network size its table added up to. Zero without a Fraction.
type Count struct {
	S        int
	Version  uint64
	Peers    int
	Seq      uint64
	Estimate float64
}

// validCount is what a node accepts as a census: S within the count's
// bounds (0 only for a sender without a fraction), a report with a
// positive, bounded size.
func validCount(c Count, max int) bool {
	if c == (Count{}) {
		return true
	}
	return c.S >= 1 && c.S <= max && c.Peers >= 0 && c.Peers <= maxCountPeers &&
		!math.IsNaN(c.Estimate) && c.Estimate >= 0 && c.Estimate <= maxCountPeers*float64(max)
}

// maxCountPeers bounds the peers one report accounts for.
const maxCountPeers = 1 << 24

// Sample is one point of a client digest: a client peer that stands for
// Weight clients near it.
type Sample struct {
	ID     string
	Key    Key
	Coord  vivaldi.Coord
	Weight float64
	// RTT is the mean RTT, in seconds, that the holder measured to the
	// clients the point stands for (0: not measured); at most MaxSampleRTT.
	RTT float64
}

// maxSampleRTT bounds a digest point's RTT, in seconds: Vivaldi refuses
// RTTs over 10 s.
const maxSampleRTT = 10.0

// maxDigest bounds the digest a node accepts in an announcement.
const maxDigest = 64

func copyDigest(d []Sample) []Sample {
	if d == nil {
		return nil
	}
	out := make([]Sample, len(d))
	for i, s := range d {
		s.Coord = copyCoord(s.Coord)
		out[i] = s
	}
	return out
}

// validDigest checks a received digest: bounded, valid coordinates, finite
// positive weights, RTTs in [0, MaxSampleRTT].
func validDigest(d []Sample) bool {
	if len(d) > maxDigest {
		return false
	}
	for _, s := range d {
		if !validCoord(s.Coord) || !(s.Weight > 0) || math.IsInf(s.Weight, 0) || !validSampleRTT(s.RTT) {
			return false
		}
	}
	return true
}

func validSampleRTT(r float64) bool { return r >= 0 && r <= maxSampleRTT }

// Beats is the fencing order: t is fresher than o if its epoch is higher, or
// the epochs are equal and its holder key is higher. When two peers hold one
// token the holder of the version that loses drops it, as the fencing tokens
// of ZooKeeper- and Hadoop-style elections do; since the order is total,
// every pair of holders resolves to exactly one.
func (t Token) Beats(o Token) bool {
	if t.Epoch != o.Epoch {
		return t.Epoch > o.Epoch
	}
	return bytes.Compare(t.HolderKey[:], o.HolderKey[:]) > 0
}

// sameVersion reports whether t and o name the same version of one token.
func (t Token) sameVersion(o Token) bool {
	return t.ID == o.ID && t.Epoch == o.Epoch && t.HolderKey == o.HolderKey
}

// validCoord reports whether c can be used in the force field: a non-empty
// vector of finite numbers and a finite, non-negative height.
func validCoord(c vivaldi.Coord) bool {
	if len(c.Vec) == 0 {
		return false
	}
	for _, v := range c.Vec {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return false
		}
	}
	return !math.IsNaN(c.Height) && !math.IsInf(c.Height, 0) && c.Height >= 0
}

// copyCoord returns c with its own vector, so a caller that reuses its slice
// cannot change a token behind the node's back.
func copyCoord(c vivaldi.Coord) vivaldi.Coord {
	c.Vec = append([]float64(nil), c.Vec...)
	return c
}

// copyToken deep-copies the slices of t.
func copyToken(t Token) Token {
	t.Coord = copyCoord(t.Coord)
	t.Digest = copyDigest(t.Digest)
	return t
}
