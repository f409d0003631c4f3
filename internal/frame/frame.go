// Package frame reads the varint-delimited protobuf frames of the
// project's stream protocols (attach, token moves, surveys), telling a
// stream that failed apart from bytes that do not decode.
package frame

import (
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/multiformats/go-varint"
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
	if err := ReadMsg(fr, max, m); err != nil {
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

// ReadMsg reads one varint-delimited protobuf of at most max bytes from r
// into m, with the errors of go-msgio's pbio reader (io.ErrShortBuffer for a
// frame over max, go-varint's for a bad length, io.EOF before the first
// byte, io.ErrUnexpectedEOF within the frame). Unlike pbio's, it reads
// exactly the frame's bytes and allocates no 4 KiB read buffer per call: a
// swarm of thousands of peers opens a stream for every request, and those
// buffers were the largest share of its allocations.
func ReadMsg(r io.Reader, max int, m proto.Message) error {
	br := byteReader{r: r}
	n, err := varint.ReadUvarint(&br)
	if err != nil {
		return err
	}
	if n > uint64(max) {
		return io.ErrShortBuffer
	}
	var body []byte
	if n <= maxPooled {
		bp := bodies.Get().(*[]byte)
		defer bodies.Put(bp)
		body = (*bp)[:n]
	} else {
		body = make([]byte, n)
	}
	if _, err := io.ReadFull(r, body); err != nil {
		return err
	}
	// proto.Unmarshal copies what it keeps: the body can be reused.
	return proto.Unmarshal(body, m)
}

// maxPooled is the largest body kept for reuse; larger frames (rare: a
// routing-table's worth of peers) get their own buffer.
const maxPooled = 4 << 10

var bodies = sync.Pool{New: func() any { b := make([]byte, maxPooled); return &b }}

// byteReader reads r one byte at a time for the length prefix, so that
// nothing past the frame is taken from the stream.
type byteReader struct {
	r   io.Reader
	buf [1]byte
}

func (b *byteReader) ReadByte() (byte, error) {
	for {
		n, err := b.r.Read(b.buf[:])
		if n == 1 {
			return b.buf[0], nil
		}
		if err != nil {
			return 0, err
		}
	}
}
