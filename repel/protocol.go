package repel

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/crypto"
	lpnet "github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-msgio/pbio"
	"google.golang.org/protobuf/proto"

	"github.com/superpeer-overlay/superpeer/internal/frame"
	"github.com/superpeer-overlay/superpeer/repel/pb"
	"github.com/superpeer-overlay/superpeer/vivaldi"
)

// The wire of the token method: announcements ride, signed by their
// holders, on the Vivaldi exchanges (Piggyback) and go to the other
// holders over the announce protocol, or are gossiped on the tokens topic
// with GossipSub (signed, StrictSign: pubsub's default); moves go over the
// move protocol as one request and one answer per stream. Every ID derives
// from the node's protocol prefix (wireIDs).
const (
	// maxAnnounceSize caps an announcement: a full digest (MaxDigest samples
	// of 32 dimensions) is about 20 KiB, DigestSize 16 in 8 dimensions
	// under 2 KiB.
	maxAnnounceSize = 24 << 10
	// maxMoveFrame caps a move frame; offers and acks carry no digest in
	// practice, but a frame that does still fits.
	maxMoveFrame = maxAnnounceSize
	// maxSurveyFrame caps a survey frame: MaxSurveyClients peer IDs of up
	// to 42 bytes are about 11 KiB.
	maxSurveyFrame = maxAnnounceSize

	// moveStreamTimeout bounds a move, survey or announce stream, or
	// MoveTimeout if that is longer (a dilated swarm's).
	moveStreamTimeout = 10 * time.Second
)

// wireIDs are the protocol IDs and the topic of the token method under one
// prefix (dht.Node.ProtocolPrefix); under dht.DefaultProtocolPrefix they
// are /superpeer/repel/move/1.0.0, .../announce/1.0.0, .../survey/1.0.0 and
// the topic /superpeer/repel/tokens/1.
type wireIDs struct {
	// move hands a token over: MOVE, answered by ACK or REFUSE.
	move protocol.ID
	// announce carries a holder's announcement, signed and with its client
	// digest, to each other live holder (Piggyback dissemination): one
	// pb.SignedToken frame per stream, unanswered.
	announce protocol.ID
	// survey carries surveys (Config.SurveyInterval): one SURVEY or REPORT
	// frame per stream, unanswered.
	survey protocol.ID
	// topic is the GossipSub topic of token announcements.
	topic string
}

func wireIDsUnder(prefix protocol.ID) wireIDs {
	return wireIDs{
		move:     prefix + "/repel/move/1.0.0",
		announce: prefix + "/repel/announce/1.0.0",
		survey:   prefix + "/repel/survey/1.0.0",
		topic:    string(prefix) + "/repel/tokens/1",
	}
}

// Reasons a gossip message or a move frame is refused, as counted in Drops.
const (
	dropDecode     = "decode"       // not a protobuf, over the cap, or a field malformed
	dropHolder     = "bad-holder"   // the holder is not a peer ID
	dropNotHolder  = "not-holder"   // the signed author is not the holder the token names
	dropOutOfRange = "out-of-range" // token ID ≥ S
	dropCoord      = "bad-coord"    // a coordinate NaN, infinite, out of range or empty
	dropDigest     = "bad-digest"   // a digest too long, with a bad peer ID, weight or RTT
	dropFrameType  = "bad-type"     // a move frame of the wrong type for its place
	dropWrite      = "write-error"  // the other side went away mid-exchange
	dropStep       = "step"         // the model refused the message (see StepErrors)
	dropSurvey     = "bad-survey"   // a survey or report with no, too many, repeated or bad peers, or a bad RTT
	dropCount      = "bad-count"    // a census count out of range or a report with a bad estimate
	dropCert       = "bad-cert"     // a hand-over whose giver's certificate is missing, oversized or does not verify
)

// dropReason names the drop reason of an error from validateAnnounce or Step.
func dropReason(err error) string {
	switch {
	case errors.Is(err, errNotHolder):
		return dropNotHolder
	case errors.Is(err, errTokenOutOfRange):
		return dropOutOfRange
	case errors.Is(err, errInvalidCoord):
		return dropCoord
	case errors.Is(err, errInvalidDigest):
		return dropDigest
	case errors.Is(err, errBadSurvey):
		return dropSurvey
	case errors.Is(err, errInvalidCount):
		return dropCount
	}
	return dropStep
}

// coordToPB and coordFromPB convert coordinates; coordFromPB refuses what
// vivaldi would not store (NaN/Inf, out of range, too many dimensions).
func coordToPB(c vivaldi.Coord) *pb.Coord {
	return &pb.Coord{Vec: append([]float64(nil), c.Vec...), Height: c.Height, Error: c.Error}
}

func coordFromPB(c *pb.Coord) (vivaldi.Coord, error) {
	if c == nil {
		return vivaldi.Coord{}, errInvalidCoord
	}
	co := vivaldi.Coord{Vec: append([]float64(nil), c.Vec...), Height: c.Height, Error: c.Error}
	if err := co.Check(); err != nil {
		return vivaldi.Coord{}, fmt.Errorf("%w: %v", errInvalidCoord, err)
	}
	return co, nil
}

// TokenToPB is the wire form of a token version.
func TokenToPB(t Token) *pb.Token {
	out := &pb.Token{
		Id:       t.ID,
		Epoch:    t.Epoch,
		Holder:   []byte(t.Holder),
		Coord:    coordToPB(t.Coord),
		Moves:    t.Moves,
		Surveyed: t.Surveyed,
	}
	if !t.HeldSince.IsZero() {
		out.HeldSinceUnixNano = t.HeldSince.UnixNano()
	}
	out.Seq = t.Seq
	if !t.Issued.IsZero() {
		out.IssuedUnixNano = t.Issued.UnixNano()
	}
	out.CountS, out.CountVersion, out.CountPeers = uint32(t.Count.S), t.Count.Version, uint32(t.Count.Peers)
	out.CountSeq, out.CountEstimate = t.Count.Seq, t.Count.Estimate
	out.Giver, out.GiverEpoch, out.Cert, out.Rival = []byte(t.Giver), t.GiverEpoch, t.Cert, t.Rival
	for _, s := range t.Digest {
		out.Digest = append(out.Digest, &pb.Sample{Id: []byte(s.ID), Coord: coordToPB(s.Coord), Weight: s.Weight, Rtt: s.RTT})
	}
	return out
}

// errBadPeerID is a holder or digest sample that is not a peer ID.
var errBadPeerID = errors.New("repel: not a peer ID")

// tokenFromPB decodes a token version and checks what the wire alone can
// tell: the holder and every digest sample are peer IDs (their kad keys are
// computed here, never taken from the sender), coordinates are valid and
// the digest is bounded with positive finite weights and RTTs in [0,
// MaxSampleRTT]. The ID range and the
// author are checked by validateAnnounce, which needs the config and the
// signed author.
func tokenFromPB(m *pb.Token) (Token, error) {
	if m == nil {
		return Token{}, errors.New("repel: no token")
	}
	holder, err := peer.IDFromBytes(m.Holder)
	if err != nil {
		return Token{}, fmt.Errorf("%w: holder: %v", errBadPeerID, err)
	}
	co, err := coordFromPB(m.Coord)
	if err != nil {
		return Token{}, err
	}
	t := Token{
		ID:        m.Id,
		Epoch:     m.Epoch,
		Holder:    string(holder),
		HolderKey: PeerKey(string(holder)),
		Coord:     co,
		Moves:     m.Moves,
		Surveyed:  m.Surveyed,
	}
	if m.HeldSinceUnixNano != 0 {
		t.HeldSince = time.Unix(0, m.HeldSinceUnixNano)
	}
	t.Seq = m.Seq
	if m.IssuedUnixNano != 0 {
		t.Issued = time.Unix(0, m.IssuedUnixNano)
	}
	t.Count = Count{S: int(m.CountS), Version: m.CountVersion, Peers: int(m.CountPeers), Seq: m.CountSeq, Estimate: m.CountEstimate}
	t.GiverEpoch, t.Rival = m.GiverEpoch, m.Rival
	if len(m.Giver) > 0 {
		giver, err := peer.IDFromBytes(m.Giver)
		if err != nil {
			return Token{}, fmt.Errorf("%w: giver: %v", errBadPeerID, err)
		}
		if len(m.Cert) == 0 || len(m.Cert) > maxCert {
			return Token{}, fmt.Errorf("%w: a hand-over with a certificate of %d bytes", errBadCert, len(m.Cert))
		}
		t.Giver, t.Cert = string(giver), append([]byte(nil), m.Cert...)
	} else if len(m.Cert) > 0 {
		return Token{}, fmt.Errorf("%w: a certificate without a giver", errBadCert)
	}
	if !validCount(t.Count, math.MaxUint32) {
		return Token{}, fmt.Errorf("%w: %+v", errInvalidCount, t.Count)
	}
	if len(m.Digest) > maxDigest {
		return Token{}, fmt.Errorf("%w: %d samples", errInvalidDigest, len(m.Digest))
	}
	for _, s := range m.Digest {
		id, err := peer.IDFromBytes(s.Id)
		if err != nil {
			return Token{}, fmt.Errorf("%w: sample: %v", errInvalidDigest, err)
		}
		sc, err := coordFromPB(s.Coord)
		if err != nil {
			return Token{}, fmt.Errorf("%w: sample: %v", errInvalidDigest, err)
		}
		if !(s.Weight > 0) || math.IsInf(s.Weight, 0) {
			return Token{}, fmt.Errorf("%w: weight %v", errInvalidDigest, s.Weight)
		}
		if !validSampleRTT(s.Rtt) {
			return Token{}, fmt.Errorf("%w: RTT %v", errInvalidDigest, s.Rtt)
		}
		t.Digest = append(t.Digest, Sample{ID: string(id), Key: PeerKey(string(id)), Coord: sc, Weight: s.Weight, RTT: s.Rtt})
	}
	return t, nil
}

// EncodeAnnounce is the gossip payload announcing t.
func EncodeAnnounce(t Token) ([]byte, error) {
	b, err := proto.Marshal(&pb.Announce{Token: TokenToPB(t)})
	if err != nil {
		return nil, err
	}
	if len(b) > maxAnnounceSize {
		return nil, fmt.Errorf("repel: announcement of %d bytes over the cap %d", len(b), maxAnnounceSize)
	}
	return b, nil
}

// decodeAnnounce parses a gossip payload; it applies the size cap and
// tokenFromPB's checks. The reason names the drop counter of a refusal.
func decodeAnnounce(data []byte) (t Token, reason string, err error) {
	if len(data) > maxAnnounceSize {
		return Token{}, dropDecode, fmt.Errorf("repel: announcement of %d bytes over the cap %d", len(data), maxAnnounceSize)
	}
	var m pb.Announce
	if err := proto.Unmarshal(data, &m); err != nil {
		return Token{}, dropDecode, err
	}
	t, err = tokenFromPB(m.Token)
	if err != nil {
		return Token{}, tokenReason(err), err
	}
	return t, "", nil
}

func tokenReason(err error) string {
	switch {
	case errors.Is(err, errBadPeerID):
		return dropHolder
	case errors.Is(err, errInvalidDigest):
		return dropDigest
	case errors.Is(err, errInvalidCoord):
		return dropCoord
	case errors.Is(err, errInvalidCount):
		return dropCount
	case errors.Is(err, errBadCert):
		return dropCert
	}
	return dropDecode
}

// announceValidator is the validator of the tokens topic: it refuses (Reject, so
// GossipSub penalises the forwarder and never relays it) an announcement
// that does not decode, whose signed author is not the holder it names,
// whose token ID is out of range, or whose coordinates or digest are
// invalid; each refusal is counted by reason. An accepted message carries
// the decoded Token in ValidatorData.
func announceValidator(cfg Config, pub func(peer.ID) crypto.PubKey, count func(reason string)) pubsub.ValidatorEx {
	return func(_ context.Context, _ peer.ID, m *pubsub.Message) pubsub.ValidationResult {
		t, reason, err := decodeAnnounce(m.GetData())
		if err == nil {
			err = validateAnnounce(cfg, string(m.GetFrom()), t)
			reason = dropReason(err)
		}
		if err == nil {
			if err = verifyHandover(t, pub); err != nil {
				reason = dropCert
			}
		}
		if err != nil {
			count(reason)
			log.Debugw("repel: announcement refused", "from", m.GetFrom(), "reason", reason, "err", err)
			return pubsub.ValidationReject
		}
		m.ValidatorData = t
		return pubsub.ValidationAccept
	}
}

// moveFrameType maps the model's message types to the wire's and back.
func moveFrameType(t MsgType) pb.MoveFrame_Type {
	switch t {
	case MsgMove:
		return pb.MoveFrame_MOVE
	case MsgMoveAck:
		return pb.MoveFrame_ACK
	case MsgMoveRefuse:
		return pb.MoveFrame_REFUSE
	}
	return pb.MoveFrame_UNKNOWN
}

// EncodeMove is the frame of a move-protocol message.
func EncodeMove(m Message) *pb.MoveFrame {
	return &pb.MoveFrame{Type: moveFrameType(m.Type), Token: TokenToPB(m.Token), Reason: uint32(m.Reason)}
}

// decodeMove turns a frame into a model message from the authenticated
// peer from to self. want lists the frame types acceptable here (MOVE for
// the handler, ACK or REFUSE for the answer); anything else is refused with
// DropFrameType.
func decodeMove(f *pb.MoveFrame, from, self peer.ID, want ...pb.MoveFrame_Type) (Message, string, error) {
	ok := false
	for _, w := range want {
		ok = ok || f.Type == w
	}
	if !ok {
		return Message{}, dropFrameType, fmt.Errorf("repel: move frame of type %v", f.Type)
	}
	t, err := tokenFromPB(f.Token)
	if err != nil {
		return Message{}, tokenReason(err), err
	}
	m := Message{From: string(from), To: string(self), Token: t}
	switch f.Type {
	case pb.MoveFrame_MOVE:
		m.Type = MsgMove
	case pb.MoveFrame_ACK:
		m.Type = MsgMoveAck
	case pb.MoveFrame_REFUSE:
		m.Type = MsgMoveRefuse
		if f.Reason > uint32(refuseStale) || f.Reason == uint32(refuseNone) {
			return Message{}, dropFrameType, fmt.Errorf("repel: refusal with reason %d", f.Reason)
		}
		m.Reason = refuseReason(f.Reason)
	}
	return m, "", nil
}

// readMove reads one capped move frame.
func readMove(s lpnet.Stream) (*pb.MoveFrame, error) {
	var f pb.MoveFrame
	if err := frame.Read(s, maxMoveFrame, &f); err != nil {
		return nil, err
	}
	return &f, nil
}

// writeMove writes one move frame and returns its size.
func writeMove(s lpnet.Stream, m Message) (int, error) {
	f := EncodeMove(m)
	if err := pbio.NewDelimitedWriter(s).WriteMsg(f); err != nil {
		return 0, err
	}
	return proto.Size(f), nil
}

// awaitClose waits for the other side to close: mocknet delivers a closing
// writer's buffered data ahead of the link delay, so the answerer lets the
// asker close first.
func awaitClose(s lpnet.Stream) {
	var one [1]byte
	_, _ = s.Read(one[:])
}

// EncodeSurvey is the frame of a survey-protocol message (MsgSurvey or
// MsgSurveyReport); RTTs go in whole microseconds.
func EncodeSurvey(m Message) *pb.SurveyFrame {
	tok := m.Token
	tok.Digest = nil
	f := &pb.SurveyFrame{Token: TokenToPB(tok)}
	switch m.Type {
	case MsgSurvey:
		f.Type = pb.SurveyFrame_SURVEY
		for _, id := range m.Survey {
			f.Peers = append(f.Peers, []byte(id))
		}
	case MsgSurveyReport:
		f.Type = pb.SurveyFrame_REPORT
		for _, r := range m.RTTs {
			us := int32(-1)
			if r >= 0 && r <= maxSampleRTT {
				us = int32(math.Round(r * 1e6))
			}
			f.RttUs = append(f.RttUs, us)
		}
	}
	return f
}

// decodeSurvey turns a survey frame into a model message from the
// authenticated peer from to self: a SURVEY's peers must be peer IDs, a
// REPORT's RTTs −1 (not measured) or within [0, MaxSampleRTT], at most
// MaxSurveyClients of either; the model checks the rest (Step).
func decodeSurvey(f *pb.SurveyFrame, from, self peer.ID) (Message, string, error) {
	t, err := tokenFromPB(f.Token)
	if err != nil {
		return Message{}, tokenReason(err), err
	}
	m := Message{From: string(from), To: string(self), Token: t}
	switch f.Type {
	case pb.SurveyFrame_SURVEY:
		m.Type = MsgSurvey
		if len(f.Peers) > maxSurveyClients || len(f.RttUs) != 0 {
			return Message{}, dropSurvey, fmt.Errorf("%w: %d peers, %d RTTs", errBadSurvey, len(f.Peers), len(f.RttUs))
		}
		for _, b := range f.Peers {
			id, err := peer.IDFromBytes(b)
			if err != nil {
				return Message{}, dropSurvey, fmt.Errorf("%w: %v", errBadSurvey, err)
			}
			m.Survey = append(m.Survey, string(id))
		}
	case pb.SurveyFrame_REPORT:
		m.Type = MsgSurveyReport
		if len(f.RttUs) > maxSurveyClients || len(f.Peers) != 0 {
			return Message{}, dropSurvey, fmt.Errorf("%w: %d RTTs, %d peers", errBadSurvey, len(f.RttUs), len(f.Peers))
		}
		for _, us := range f.RttUs {
			if us < -1 || float64(us) > maxSampleRTT*1e6 {
				return Message{}, dropSurvey, fmt.Errorf("%w: RTT %d µs", errBadSurvey, us)
			}
			r := -1.0
			if us >= 0 {
				r = float64(us) / 1e6
			}
			m.RTTs = append(m.RTTs, r)
		}
	default:
		return Message{}, dropFrameType, fmt.Errorf("repel: survey frame of type %v", f.Type)
	}
	return m, "", nil
}
