package vivaldi

import (
	"errors"
	"math"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/superpeer-overlay/superpeer/vivaldi/pb"
)

// frame encodes m as one length-prefixed frame.
func frame(m proto.Message) []byte {
	b, _ := proto.Marshal(m)
	return append(uvarint(uint64(len(b))), b...)
}

func uvarint(x uint64) []byte {
	var out []byte
	for x >= 0x80 {
		out = append(out, byte(x)|0x80)
		x >>= 7
	}
	return append(out, byte(x))
}

func pbCoord(vec []float64, h, e float64) *pb.Message {
	return &pb.Message{Coord: &pb.Coordinate{Vec: vec, Height: h, Error: e}}
}

// badFrames are frames the decoder must refuse for dims = 3, by reason.
func badFrames() map[string][]byte {
	return map[string][]byte{
		DropOversize:   append(uvarint(MaxMessageSize+1), make([]byte, 16)...),
		DropDecode:     append(uvarint(5), 0xff, 0xff, 0xff, 0xff, 0xff),
		DropNoCoord:    frame(&pb.Message{}),
		DropNonFinite:  frame(pbCoord([]float64{0, math.NaN(), 0}, 0, 1)),
		DropOutOfRange: frame(pbCoord([]float64{0, 0, 0}, -1, 1)),
		DropDimensions: frame(pbCoord([]float64{0, 0}, 0, 1)),
	}
}

func TestDecodeCoord_Refuses(t *testing.T) {
	for reason, b := range badFrames() {
		_, err := DecodeCoord(b, 3)
		var fe *FrameError
		if !errors.As(err, &fe) || fe.Reason != reason {
			t.Errorf("%s: err = %v, want FrameError %q", reason, err, reason)
		}
	}
	// Truncated: the prefix promises more than arrives.
	if _, err := DecodeCoord(append(uvarint(10), 1, 2), 3); err == nil {
		t.Error("truncated frame accepted")
	}
}

func TestDecodeCoord_RoundTrip(t *testing.T) {
	c := Coord{Vec: []float64{0.01, -0.02, 0.03}, Height: 0.004, Error: 0.3}
	got, err := DecodeCoord(EncodeCoord(c), 3)
	if err != nil {
		t.Fatal(err)
	}
	if got.DistanceTo(c) != c.Height*2 || got.Error != c.Error {
		t.Fatalf("round trip gave %v, want %v", got, c)
	}
}

func FuzzDecodeCoord(f *testing.F) {
	f.Add(EncodeCoord(Coord{Vec: []float64{0.01, 0.02, 0.03}, Height: 0.001, Error: 0.5}))
	f.Add(EncodeCoord(Coord{Vec: []float64{0, 0, 0}}))
	for _, b := range badFrames() {
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add(uvarint(1 << 62))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := DecodeCoord(b, 3)
		if err != nil {
			var fe *FrameError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v is not a FrameError", err)
			}
			return
		}
		if !c.IsValid() || len(c.Vec) != 3 {
			t.Fatalf("accepted invalid coordinate %v", c)
		}
		// An accepted coordinate survives a round trip unchanged.
		again, err := DecodeCoord(EncodeCoord(c), 3)
		if err != nil || again.Height != c.Height || again.Error != c.Error || again.DistanceTo(c) != 2*c.Height {
			t.Fatalf("round trip of %v gave %v, %v", c, again, err)
		}
	})
}
