package vivaldi

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-msgio/pbio"
	ma "github.com/multiformats/go-multiaddr"
	"google.golang.org/protobuf/proto"

	framing "github.com/superpeer-overlay/superpeer/internal/frame"
	"github.com/superpeer-overlay/superpeer/vivaldi/pb"
)

// maxMessageSize caps every frame we read and write (bytes). A coordinate of
// MaxDimensions doubles is under 300 bytes; a reply with four neighbours of
// eight dimensions about 800 (a replier leaves out neighbours that would
// not fit). Anything larger is not ours.
const maxMessageSize = 1024

// MaxPiggyback caps the piggyback of one frame: another protocol's data
// riding on the exchange. A frame may be 1 KiB (the cap of a frame without
// one) plus this (and its field's few bytes of framing) long.
const MaxPiggyback = 8 << 10

// maxFrameSize is what a reader accepts: the coordinate part and a full
// piggyback.
const maxFrameSize = maxMessageSize + MaxPiggyback + 8

// Bounds on one neighbour entry of a reply.
const (
	maxPeerIDSize    = 64 // bytes of a peer ID (an Ed25519 one has 38)
	maxNeighborAddrs = 2  // multiaddrs per neighbour
	maxAddrSize      = 64 // bytes of one binary multiaddr
)

// Drop reasons: why a frame was refused. Service.Drops counts them.
const (
	dropOversize   = "oversize"      // length prefix beyond MaxMessageSize
	dropDecode     = "decode"        // truncated frame or bad protobuf
	dropNoCoord    = "missing_coord" // a Message without a coordinate
	dropNonFinite  = "non_finite"    // NaN or Inf in the coordinate
	dropOutOfRange = "out_of_range"  // component, height or error out of range
	dropDimensions = "dimensions"    // not our number of dimensions
	dropStream     = "stream"        // the stream failed (reset, timeout, EOF)
)

// Neighbour refusals: one neighbour entry of a frame refused, while the rest
// of the frame is used. Service.Drops counts them too, one per entry.
const (
	dropNeighborID     = "neighbor_id"     // not a peer ID, or over MaxPeerIDSize
	dropNeighborCoord  = "neighbor_coord"  // missing, invalid, or not our dimensions
	dropNeighborRTT    = "neighbor_rtt"    // NaN, Inf, negative or over MaxRTT
	dropNeighborAddr   = "neighbor_addr"   // over MaxNeighborAddrs or MaxAddrSize, or unparsable
	dropNeighborExcess = "neighbor_excess" // beyond what was asked for (any, in a request)
	dropNeighborDup    = "neighbor_dup"    // repeated, or naming the caller or the replier
	// dropPiggyback: a piggyback over MaxPiggyback; the rest of the frame
	// is used.
	dropPiggyback = "piggyback_size"
	// dropImplausible is a reply whose coordinate the model refused as
	// implausible (ErrImplausible: Config.TriangleMargin, OutlierFactor).
	dropImplausible = "implausible"
	// dropRescaled is a sample timed across a change of the time scale
	// (Service.SetTimeScale): discarded, not a frame refused.
	dropRescaled = "rescaled"
	// dropStalled is a sample timed across a stall of this process
	// (WithStallCheck): its reply is used, its RTT is not.
	dropStalled = "stalled"
)

// wireFrame is one decoded Message: a request (Coord, Want) or a reply (Coord,
// Neighbors).
type wireFrame struct {
	Coord Coord
	// Want is how many neighbours a request asks for (at most maxShare).
	Want int
	// Neighbors are the reply's neighbour entries that passed the checks.
	Neighbors []neighbor
	// Refused counts the entries that did not, by reason (nil if none).
	Refused map[string]int
	// Piggyback is another protocol's data on the frame (Piggyback), at
	// most MaxPiggyback bytes; nil if none.
	Piggyback []byte
}

// neighbor is one neighbour entry of a reply.
type neighbor struct {
	ID    peer.ID
	RTT   float64 // the replier's measured RTT to it (s); 0 if unmeasured
	Coord Coord   // its coordinate as the replier heard it
	Addrs []ma.Multiaddr
}

// frameError is a frame refused for Reason.
type frameError struct {
	Reason string
	Err    error
}

func (e *frameError) Error() string { return "vivaldi frame: " + e.Reason + ": " + e.Err.Error() }
func (e *frameError) Unwrap() error { return e.Err }

// readCoord reads one frame from r and checks the coordinate in it, for dims
// dimensions. The error is a *FrameError naming the reason. Neighbour
// entries, if any, are ignored.
func readCoord(r io.Reader, dims int) (Coord, error) {
	f, err := readMessage(r, dims, 0)
	return f.Coord, err
}

// readMessage reads one frame from r: its coordinate, for dims dimensions,
// must be valid, or the whole frame is refused with a *FrameError naming
// the reason. Of its neighbour entries the first maxNeighbors valid ones
// are kept; every other entry is refused and counted in wireFrame.Refused.
func readMessage(r io.Reader, dims, maxNeighbors int) (wireFrame, error) {
	var m pb.Message
	if err := framing.ReadMsg(r, maxFrameSize, &m); err != nil {
		switch {
		case errors.Is(err, io.ErrShortBuffer):
			return wireFrame{}, &frameError{dropOversize, err}
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
			return wireFrame{}, &frameError{dropDecode, err}
		default:
			var ne interface{ Timeout() bool }
			if errors.As(err, &ne) {
				return wireFrame{}, &frameError{dropStream, err}
			}
			return wireFrame{}, &frameError{dropDecode, err}
		}
	}
	c, err := fromPB(&m, dims)
	if err != nil {
		return wireFrame{}, err
	}
	f := wireFrame{Coord: c, Want: int(min(m.GetWantNeighbors(), maxShare))}
	switch b := m.GetPiggyback(); {
	case len(b) > MaxPiggyback:
		f.refuse(dropPiggyback)
	case len(b) > 0:
		f.Piggyback = b
	}
	seen := make(map[peer.ID]bool, len(m.GetNeighbors()))
	for _, e := range m.GetNeighbors() {
		if len(f.Neighbors) >= maxNeighbors {
			f.refuse(dropNeighborExcess)
			continue
		}
		n, reason := neighborFromPB(e, dims)
		if reason == "" && seen[n.ID] {
			reason = dropNeighborDup
		}
		if reason != "" {
			f.refuse(reason)
			continue
		}
		seen[n.ID] = true
		f.Neighbors = append(f.Neighbors, n)
	}
	return f, nil
}

func (f *wireFrame) refuse(reason string) {
	if f.Refused == nil {
		f.Refused = make(map[string]int)
	}
	f.Refused[reason]++
}

// neighborFromPB checks one entry; the reason is "" if it is good.
func neighborFromPB(e *pb.Neighbor, dims int) (neighbor, string) {
	b := e.GetId()
	if len(b) == 0 || len(b) > maxPeerIDSize {
		return neighbor{}, dropNeighborID
	}
	id, err := peer.IDFromBytes(b)
	if err != nil {
		return neighbor{}, dropNeighborID
	}
	rtt := e.GetRtt()
	if math.IsNaN(rtt) || rtt < 0 || rtt > MaxRTT.Seconds() {
		return neighbor{}, dropNeighborRTT
	}
	if e.GetCoord() == nil {
		return neighbor{}, dropNeighborCoord
	}
	c := Coord{Vec: append([]float64(nil), e.Coord.GetVec()...), Height: e.Coord.GetHeight(), Error: e.Coord.GetError()}
	if c.Check() != nil || len(c.Vec) != dims {
		return neighbor{}, dropNeighborCoord
	}
	if len(e.GetAddrs()) > maxNeighborAddrs {
		return neighbor{}, dropNeighborAddr
	}
	var addrs []ma.Multiaddr
	for _, ab := range e.GetAddrs() {
		if len(ab) == 0 || len(ab) > maxAddrSize {
			return neighbor{}, dropNeighborAddr
		}
		a, err := ma.NewMultiaddrBytes(ab)
		if err != nil {
			return neighbor{}, dropNeighborAddr
		}
		addrs = append(addrs, a)
	}
	return neighbor{ID: id, RTT: rtt, Coord: c, Addrs: addrs}, ""
}

// decodeMessage is ReadMessage on a byte slice holding one frame.
func decodeMessage(b []byte, dims, maxNeighbors int) (wireFrame, error) {
	return readMessage(bytes.NewReader(b), dims, maxNeighbors)
}

// encodeMessage is f as one length-prefixed frame (Refused is not sent).
// Neighbours at the end that would take the frame over MaxMessageSize are
// left out, and so are addresses over the bounds, so that every frame we
// send is one we accept.
func encodeMessage(f wireFrame) []byte {
	var buf bytes.Buffer
	_ = pbio.NewDelimitedWriter(&buf).WriteMsg(messageToPB(f))
	return buf.Bytes()
}

// messageToPB is f as a Message that fits MaxMessageSize: trailing
// neighbours are dropped until it does.
func messageToPB(f wireFrame) *pb.Message {
	m := toPB(f.Coord)
	if f.Want > 0 {
		m.WantNeighbors = uint32(min(f.Want, maxShare))
	}
	for _, n := range f.Neighbors {
		e := &pb.Neighbor{
			Id:    []byte(n.ID),
			Rtt:   n.RTT,
			Coord: &pb.Coordinate{Vec: n.Coord.Vec, Height: n.Coord.Height, Error: n.Coord.Error},
		}
		for _, a := range n.Addrs {
			if len(e.Addrs) >= maxNeighborAddrs {
				break
			}
			if b := a.Bytes(); len(b) <= maxAddrSize {
				e.Addrs = append(e.Addrs, b)
			}
		}
		m.Neighbors = append(m.Neighbors, e)
	}
	for len(m.Neighbors) > 0 && frameSize(m) > maxMessageSize {
		m.Neighbors = m.Neighbors[:len(m.Neighbors)-1]
	}
	if len(f.Piggyback) <= MaxPiggyback {
		// Added after the neighbours are cut to size: MaxMessageSize
		// bounds the rest of the frame.
		m.Piggyback = f.Piggyback
	}
	return m
}

// frameSize is the bytes m takes as a frame, less its length prefix: what
// MaxMessageSize bounds (before a piggyback is added).
func frameSize(m *pb.Message) int { return proto.Size(m) }

// String is a short description of f, for logs.
func (f wireFrame) String() string {
	return fmt.Sprintf("frame{coord %v, want %d, %d neighbours, %d piggyback bytes, refused %v}", f.Coord, f.Want, len(f.Neighbors), len(f.Piggyback), f.Refused)
}

// decodeCoord is readCoord on a byte slice holding one frame.
func decodeCoord(b []byte, dims int) (Coord, error) {
	return readCoord(bytes.NewReader(b), dims)
}

// encodeCoord is c as one length-prefixed frame.
func encodeCoord(c Coord) []byte {
	var buf bytes.Buffer
	_ = pbio.NewDelimitedWriter(&buf).WriteMsg(toPB(c))
	return buf.Bytes()
}

func fromPB(m *pb.Message, dims int) (Coord, error) {
	if m.GetCoord() == nil {
		return Coord{}, &frameError{dropNoCoord, errors.New("no coordinate")}
	}
	c := Coord{
		Vec:    append([]float64(nil), m.Coord.GetVec()...),
		Height: m.Coord.GetHeight(),
		Error:  m.Coord.GetError(),
	}
	if err := c.Check(); err != nil {
		switch err {
		case ErrNonFinite:
			return Coord{}, &frameError{dropNonFinite, err}
		case ErrDimensions:
			return Coord{}, &frameError{dropDimensions, err}
		default:
			return Coord{}, &frameError{dropOutOfRange, err}
		}
	}
	if len(c.Vec) != dims {
		return Coord{}, &frameError{dropDimensions, ErrDimensions}
	}
	return c, nil
}

func toPB(c Coord) *pb.Message {
	return &pb.Message{Coord: &pb.Coordinate{Vec: c.Vec, Height: c.Height, Error: c.Error}}
}
