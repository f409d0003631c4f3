package superpeer

import (
	"errors"
	"fmt"
	"io"
	"sort"

	"github.com/libp2p/go-msgio/pbio"
	"google.golang.org/protobuf/proto"
)

func sortInts(xs []int, less func(a, b int) bool) {
	sort.Slice(xs, func(i, j int) bool { return less(xs[i], xs[j]) })
}

// ErrStreamFailed marks a ReadFrame error that came from the stream itself
// (closed, reset, or cut off mid-frame), not from bytes that do not decode.
var ErrStreamFailed = errors.New("stream failed")

// ReadFrame reads one varint-delimited protobuf of at most max bytes from r
// into m. An error of the stream wraps ErrStreamFailed: a peer that went
// away mid-exchange is not a malformed frame, and the two are counted
// apart.
func ReadFrame(r io.Reader, max int, m proto.Message) error {
	fr := &failReader{r: r}
	if err := pbio.NewDelimitedReader(fr, max).ReadMsg(m); err != nil {
		if fr.err != nil {
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
