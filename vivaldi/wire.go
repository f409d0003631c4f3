package vivaldi

import (
	"bytes"
	"errors"
	"io"

	"github.com/libp2p/go-msgio/pbio"

	"github.com/superpeer-overlay/superpeer/vivaldi/pb"
)

// MaxMessageSize caps every frame we read (bytes). A coordinate of
// MaxDimensions doubles is under 300 bytes; anything larger is not ours.
const MaxMessageSize = 1024

// Drop reasons: why a frame was refused. Service.Drops counts them.
const (
	DropOversize   = "oversize"      // length prefix beyond MaxMessageSize
	DropDecode     = "decode"        // truncated frame or bad protobuf
	DropNoCoord    = "missing_coord" // a Message without a coordinate
	DropNonFinite  = "non_finite"    // NaN or Inf in the coordinate
	DropOutOfRange = "out_of_range"  // component, height or error out of range
	DropDimensions = "dimensions"    // not our number of dimensions
	DropStream     = "stream"        // the stream failed (reset, timeout, EOF)
)

// FrameError is a frame refused for Reason.
type FrameError struct {
	Reason string
	Err    error
}

func (e *FrameError) Error() string { return "vivaldi frame: " + e.Reason + ": " + e.Err.Error() }
func (e *FrameError) Unwrap() error { return e.Err }

// ReadCoord reads one frame from r and checks the coordinate in it, for dims
// dimensions. The error is a *FrameError naming the reason.
func ReadCoord(r io.Reader, dims int) (Coord, error) {
	var m pb.Message
	if err := pbio.NewDelimitedReader(r, MaxMessageSize).ReadMsg(&m); err != nil {
		switch {
		case errors.Is(err, io.ErrShortBuffer):
			return Coord{}, &FrameError{DropOversize, err}
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
			return Coord{}, &FrameError{DropDecode, err}
		default:
			var ne interface{ Timeout() bool }
			if errors.As(err, &ne) {
				return Coord{}, &FrameError{DropStream, err}
			}
			return Coord{}, &FrameError{DropDecode, err}
		}
	}
	return fromPB(&m, dims)
}

// DecodeCoord is ReadCoord on a byte slice holding one frame.
func DecodeCoord(b []byte, dims int) (Coord, error) {
	return ReadCoord(bytes.NewReader(b), dims)
}

// EncodeCoord is c as one length-prefixed frame.
func EncodeCoord(c Coord) []byte {
	var buf bytes.Buffer
	_ = pbio.NewDelimitedWriter(&buf).WriteMsg(toPB(c))
	return buf.Bytes()
}

func fromPB(m *pb.Message, dims int) (Coord, error) {
	if m.GetCoord() == nil {
		return Coord{}, &FrameError{DropNoCoord, errors.New("no coordinate")}
	}
	c := Coord{
		Vec:    append([]float64(nil), m.Coord.GetVec()...),
		Height: m.Coord.GetHeight(),
		Error:  m.Coord.GetError(),
	}
	if err := c.Check(); err != nil {
		switch err {
		case ErrNonFinite:
			return Coord{}, &FrameError{DropNonFinite, err}
		case ErrDimensions:
			return Coord{}, &FrameError{DropDimensions, err}
		default:
			return Coord{}, &FrameError{DropOutOfRange, err}
		}
	}
	if len(c.Vec) != dims {
		return Coord{}, &FrameError{DropDimensions, ErrDimensions}
	}
	return c, nil
}

func toPB(c Coord) *pb.Message {
	return &pb.Message{Coord: &pb.Coordinate{Vec: c.Vec, Height: c.Height, Error: c.Error}}
}
