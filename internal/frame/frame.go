// Package frame reads the varint-delimited protobuf frames of the
// project's stream protocols (attach, token moves, surveys), telling a
// stream that failed apart from bytes that do not decode.
package frame

import (
	"errors"
	"fmt"
	"io"

	"github.com/libp2p/go-msgio/pbio"
	"google.golang.org/protobuf/proto"
)

// ErrStreamFailed marks a Read error that came from the stream itself
// (closed, reset, or cut off mid-frame), not from bytes that do not decode.
var ErrStreamFailed = errors.New("stream failed")

// Read reads one varint-delimited protobuf of at most max bytes from r
// into m. An error of the stream wraps ErrStreamFailed: a peer that went
// away mid-exchange is not a malformed frame, and the two are counted
// apart.
//
// The stream's error is the cause only when the frame came short of it
// (the reader's own error, or an unexpected EOF in the length or the
// body): a reader may hand over its last bytes together with its end (a
// QUIC stream that got the FIN does), and a frame that arrived whole but
// is over the cap or does not decode is malformed even so.
func Read(r io.Reader, max int, m proto.Message) error {
	fr := &failReader{r: r}
	if err := pbio.NewDelimitedReader(fr, max).ReadMsg(m); err != nil {
		if fr.err != nil && (errors.Is(err, fr.err) || err == io.ErrUnexpectedEOF) {
			return fmt.Errorf("%w: %w", ErrStreamFailed, fr.err)
		}
		return err
	}
	return nil
}

// failReader remembers the first error its reader returned.
type failReader struct {
	r   io.Reader
	err error
}

func (f *failReader) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if err != nil && f.err == nil {
		f.err = err
	}
	return n, err
}
