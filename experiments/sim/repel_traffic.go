package sim

import (
	"time"

	pubsubpb "github.com/libp2p/go-libp2p-pubsub/pb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/superpeer-overlay/superpeer/repel"
	rpb "github.com/superpeer-overlay/superpeer/repel/pb"
)

// RepelTraffic is the token protocol's traffic in a simulated run, in the
// sizes of the real frames:
//
//   - an announcement, with repel.Piggyback (the default), is one
//     varint-delimited repel.SignedToken frame with its digest to each
//     other holder (AnnounceProtocol; a send each), and the signed version
//     without the digest, in a Gossip piggyback, once to every other peer
//     (bytes only: it rides on a Vivaldi exchange). Each peer takes each
//     version once at least; the pushes that carry it more often, and the
//     list of known versions every request carries, are not counted;
//   - with repel.GossipSub, an announcement is the payload
//     repel.EncodeAnnounce makes, in a signed GossipSub message (From, an
//     8-byte seqno, the topic, a 64-byte Ed25519 signature; the key is left
//     out, as for Ed25519 peer IDs) in a varint-delimited RPC, and it is
//     sent once to every peer but its publisher: the least any broadcast
//     costs. GossipSub's mesh relays about D copies per peer (D = 4–6), and
//     its control traffic (IHAVE, IWANT, heartbeats) is not counted;
//   - a move, ack or refusal is one varint-delimited repel.EncodeMove frame
//     to its addressee, a survey or its report one repel.EncodeSurvey frame.
//
// The attach protocol and Vivaldi (nor the measurements a survey asks
// for: RepelResult.Probes) are not counted here.
type RepelTraffic struct {
	// Sends and Bytes are the transmissions and their bytes over the run.
	Sends uint64 `json:"sends"`
	Bytes uint64 `json:"bytes"`
	// By message type ("announce", "move", "move-ack", "move-refuse",
	// "survey", "survey-report").
	SendsByType map[string]uint64 `json:"sends_by_type"`
	BytesByType map[string]uint64 `json:"bytes_by_type"`
	// SettledSends and SettledBytes are those since the tokens last
	// settled, over SettledSeconds of virtual time to the end of the run
	// (0 if they never settled): the steady state.
	SettledSends   uint64  `json:"settled_sends"`
	SettledBytes   uint64  `json:"settled_bytes"`
	SettledSeconds float64 `json:"settled_seconds"`
}

func newRepelTraffic() RepelTraffic {
	return RepelTraffic{SendsByType: map[string]uint64{}, BytesByType: map[string]uint64{}}
}

// count adds message m, sent in a swarm of n peers with S tokens, whose
// announcements travel by d.
func (t *RepelTraffic) count(m repel.Message, n, S int, d repel.Dissemination) {
	var copies, size uint64
	if m.To == "" && d == repel.Piggyback {
		direct, relayed := piggybackSizes(m)
		k := m.Type.String()
		sends := uint64(max(S-1, 0))
		bytes := sends*uint64(direct) + uint64(n-1)*uint64(relayed)
		t.Sends += sends
		t.Bytes += bytes
		t.SendsByType[k] += sends
		t.BytesByType[k] += bytes
		return
	}
	if m.To == "" {
		copies, size = uint64(n-1), uint64(announceFrameSize(m))
	} else if m.Type == repel.MsgSurvey || m.Type == repel.MsgSurveyReport {
		copies, size = 1, uint64(delimited(proto.Size(repel.EncodeSurvey(m))))
	} else {
		copies, size = 1, uint64(delimited(proto.Size(repel.EncodeMove(m))))
	}
	k := m.Type.String()
	t.Sends += copies
	t.Bytes += copies * size
	t.SendsByType[k] += copies
	t.BytesByType[k] += copies * size
}

// finish fills the settled figures: settled is when the tokens last
// settled (negative if they were not settled at the end), base the totals
// then.
func (t *RepelTraffic) finish(settled time.Duration, base [2]uint64, end time.Duration) {
	if settled < 0 || end < settled {
		return
	}
	t.SettledSends, t.SettledBytes = t.Sends-base[0], t.Bytes-base[1]
	t.SettledSeconds = (end - settled).Seconds()
}

// PerPeer is the traffic per peer per second: over the whole run (seconds
// of virtual time) and over the settled stretch at its end.
func (t RepelTraffic) PerPeer(n int, seconds float64) (msgs, bytes, settledMsgs, settledBytes float64) {
	if n > 0 && seconds > 0 {
		msgs = float64(t.Sends) / float64(n) / seconds
		bytes = float64(t.Bytes) / float64(n) / seconds
	}
	if n > 0 && t.SettledSeconds > 0 {
		settledMsgs = float64(t.SettledSends) / float64(n) / t.SettledSeconds
		settledBytes = float64(t.SettledBytes) / float64(n) / t.SettledSeconds
	}
	return
}

// announceFrameSize is the bytes one GossipSub RPC carrying announcement m
// takes on a link.
func announceFrameSize(m repel.Message) int {
	payload, err := repel.EncodeAnnounce(m.Token)
	if err != nil { // over the cap: the live peer would not send it, but count it
		payload, _ = proto.Marshal(&rpb.Announce{Token: repel.TokenToPB(m.Token)})
	}
	topic := "/superpeer/repel/tokens/1" // the topic under the default protocol prefix
	msg := &pubsubpb.Message{
		From:      []byte(m.From),
		Data:      payload,
		Seqno:     make([]byte, 8),
		Topic:     &topic,
		Signature: make([]byte, 64),
	}
	return delimited(proto.Size(&pubsubpb.RPC{Publish: []*pubsubpb.Message{msg}}))
}

// delimited is the size of a varint-length-prefixed frame of size bytes.
func delimited(size int) int { return size + protowire.SizeVarint(uint64(size)) }

// piggybackSizes are the bytes of announcement m sent directly to a
// holder (a delimited SignedToken with its digest) and relayed in a
// piggyback (the SignedToken without it, as a Gossip entry), with an
// Ed25519 signature.
func piggybackSizes(m repel.Message) (direct, relayed int) {
	st := &rpb.SignedToken{Token: repel.TokenToPB(m.Token), Signature: make([]byte, 64)}
	direct = delimited(proto.Size(st))
	st.Token.Digest = nil
	relayed = proto.Size(&rpb.Gossip{Tokens: []*rpb.SignedToken{st}})
	return direct, relayed
}
