package frame

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
	"testing/iotest"

	"google.golang.org/protobuf/proto"

	"github.com/superpeer-overlay/superpeer/repel/pb"
)

// errReset stands for a stream reset after the bytes given.
var errReset = errors.New("stream reset")

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// outcome is what Read must make of some bytes.
type outcome int

const (
	whole  outcome = iota // a frame that decodes
	bad                   // bytes that do not decode, or a frame over the cap
	failed                // the stream ended before the frame did
)

func (o outcome) String() string { return [...]string{"whole", "bad", "failed"}[o] }

// expect says, from the bytes alone, what Read(b, max) must return: the
// varint length prefix (at most 9 bytes, minimal), the cap, then the body.
func expect(b []byte, max int) (outcome, []byte) {
	var n uint64
	for i := 0; ; i++ {
		if i == len(b) {
			return failed, nil
		}
		c := b[i]
		if i == 8 && c >= 0x80 {
			return bad, nil // longer than 9 bytes
		}
		if c < 0x80 {
			if c == 0 && i > 0 {
				return bad, nil // not minimal
			}
			n |= uint64(c) << (7 * i)
			b = b[i+1:]
			break
		}
		n |= uint64(c&0x7f) << (7 * i)
	}
	if n > uint64(max) {
		return bad, nil
	}
	if uint64(len(b)) < n {
		return failed, nil
	}
	body := b[:n]
	if proto.Unmarshal(body, new(pb.MoveFrame)) != nil {
		return bad, nil
	}
	return whole, body
}

func outcomeOf(err error) outcome {
	switch {
	case err == nil:
		return whole
	case errors.Is(err, ErrStreamFailed):
		return failed
	default:
		return bad
	}
}

// readers are the ways a stream may hand over the bytes b and then end
// with end: all at once, a byte at a time, with the end given along with
// the last bytes (as a QUIC stream that got the FIN does), or in halves.
func readers(b []byte, end error) map[string]io.Reader {
	src := func() io.Reader {
		if end == io.EOF {
			return bytes.NewReader(b)
		}
		return io.MultiReader(bytes.NewReader(b), errReader{end})
	}
	return map[string]io.Reader{
		"plain":            src(),
		"one byte":         iotest.OneByteReader(src()),
		"end with data":    iotest.DataErrReader(src()),
		"halves":           iotest.HalfReader(src()),
		"one byte and end": iotest.DataErrReader(iotest.OneByteReader(src())),
	}
}

func delimited(m *pb.MoveFrame) []byte {
	b, _ := proto.Marshal(m)
	return append(binary.AppendUvarint(nil, uint64(len(b))), b...)
}

// FuzzRead: whatever the bytes and however the stream hands them over,
// Read takes a frame that is whole and decodes, refuses as malformed (not
// as a stream failure) one that is over the cap, has a bad length prefix
// or does not decode, and calls it a stream failure, wrapping the
// stream's own error, only when the stream ended before the frame did.
func FuzzRead(f *testing.F) {
	tok := &pb.Token{Id: 1, Epoch: 2, Holder: []byte("holder"), Coord: &pb.Coord{Vec: []float64{0.01, 0.02}, Height: 0.001, Error: 0.5},
		Digest: []*pb.Sample{{Id: []byte("c"), Coord: &pb.Coord{Vec: []float64{0.03, 0.04}}, Weight: 1, Rtt: 0.02}}}
	good := delimited(&pb.MoveFrame{Type: pb.MoveFrame_MOVE, Token: tok})
	f.Add(good, uint16(4096))
	f.Add(good, uint16(len(good)-2)) // one byte over the cap
	f.Add(good[:len(good)/2], uint16(4096))
	f.Add(append(good, 0x01, 0x02), uint16(4096))       // a frame, then bytes past it
	f.Add(delimited(&pb.MoveFrame{}), uint16(16))       // an empty frame
	f.Add([]byte{}, uint16(16))                         // nothing at all
	f.Add([]byte{2, 0xff, 0xff}, uint16(16))            // not a protobuf
	f.Add([]byte{0xff, 0xff, 0x03}, uint16(4096))       // over the cap
	f.Add([]byte{0x80}, uint16(16))                     // cut off in the prefix
	f.Add([]byte{0x80, 0x00}, uint16(16))               // a prefix that is not minimal
	f.Add(bytes.Repeat([]byte{0xff}, 10), uint16(4096)) // a prefix too long
	f.Add(delimited(&pb.MoveFrame{Type: pb.MoveFrame_REFUSE, Token: tok, Reason: 1}), uint16(4096))
	f.Fuzz(func(t *testing.T, b []byte, max uint16) {
		want, body := expect(b, int(max))
		for _, end := range []error{io.EOF, errReset} {
			for name, r := range readers(b, end) {
				var m pb.MoveFrame
				err := Read(r, int(max), &m)
				if got := outcomeOf(err); got != want {
					t.Fatalf("%s, ending in %v: %v (%v), want %v", name, end, got, err, want)
				}
				if want == failed && !errors.Is(err, end) && !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("%s: a stream failure %v wraps neither the stream's error %v nor an unexpected EOF", name, err, end)
				}
				if want != whole {
					continue
				}
				var w pb.MoveFrame
				_ = proto.Unmarshal(body, &w)
				opt := proto.MarshalOptions{Deterministic: true}
				gb, _ := opt.Marshal(&m)
				wb, _ := opt.Marshal(&w)
				if !bytes.Equal(gb, wb) {
					t.Fatalf("%s: read %v, the frame holds %v", name, &m, &w)
				}
			}
		}
		if want != whole {
			return
		}
		// ReadMsg takes the frame's bytes and nothing past them: a stream
		// may carry the next frame behind it.
		r := bytes.NewReader(b)
		if err := ReadMsg(r, int(max), new(pb.MoveFrame)); err != nil {
			t.Fatalf("ReadMsg: %v", err)
		}
		end := cap(b) - cap(body) + len(body)
		if rest, _ := io.ReadAll(r); !bytes.Equal(rest, b[end:]) {
			t.Fatalf("ReadMsg left %x past the frame, want %x", rest, b[end:])
		}
	})
}

// ReadMsg's errors are go-msgio's pbio reader's, which the decoders'
// drop reasons tell apart: an oversized frame is io.ErrShortBuffer.
func TestReadMsg_ErrorsAsPbio(t *testing.T) {
	for _, c := range []struct {
		name string
		b    []byte
		want error
	}{
		{"over the cap", []byte{0xff, 0xff, 0x03}, io.ErrShortBuffer},
		{"nothing at all", nil, io.EOF},
		{"cut off mid-frame", []byte{5, 0x08}, io.ErrUnexpectedEOF},
	} {
		if err := ReadMsg(bytes.NewReader(c.b), 1024, new(pb.MoveFrame)); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

// A reader that hands over its end with its last bytes, as a QUIC stream
// that got the FIN does: a frame that came whole is judged on what it
// holds, not taken for a stream that failed (FuzzRead found every kind of
// malformed frame counted as lost that way).
func TestRead_EndWithTheLastBytes(t *testing.T) {
	good := delimited(&pb.MoveFrame{Type: pb.MoveFrame_ACK})
	for _, c := range []struct {
		name string
		b    []byte
		want outcome
	}{
		{"a whole frame", good, whole},
		{"not a protobuf", []byte{2, 0xff, 0xff}, bad},
		{"over the cap", []byte{0xff, 0xff, 0x03}, bad},
		{"a prefix that is not minimal", []byte{0x80, 0x00}, bad},
		{"a prefix too long", bytes.Repeat([]byte{0xff}, 10), bad},
		{"cut off mid-frame", []byte{5, 0x08}, failed},
		{"cut off in the prefix", []byte{0x80}, failed},
		{"nothing at all", nil, failed},
	} {
		for _, end := range []error{io.EOF, errReset} {
			var m pb.MoveFrame
			err := Read(readers(c.b, end)["end with data"], 1024, &m)
			if got := outcomeOf(err); got != c.want {
				t.Errorf("%s, ending in %v: %v (%v), want %v", c.name, end, got, err, c.want)
			}
		}
	}
}
