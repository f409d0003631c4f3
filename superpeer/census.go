package superpeer

import (
	"context"
	"errors"
	"io"
	"math"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-msgio/pbio"
	"google.golang.org/protobuf/proto"

	"github.com/superpeer-overlay/superpeer/dht"
	"github.com/superpeer-overlay/superpeer/internal/census"
	"github.com/superpeer-overlay/superpeer/internal/frame"
	"github.com/superpeer-overlay/superpeer/superpeer/pb"
)

// The census protocol: superpeers exchange the superpeer count they hold
// and their tables of load reports (internal/census), so that the count
// follows a fraction of the network (WithFraction).
func censusProtocol(prefix protocol.ID) protocol.ID { return prefix + "/census/1.0.0" }

const (
	// maxCensusEntries bounds a digest: the table's own bound (128
	// others) and the sender's report, with room to spare.
	maxCensusEntries = 256
	// maxCensusID bounds a reporter's name (a peer ID is about 40 bytes).
	maxCensusID = 128
	// maxCensusFrame bounds a digest frame: maxCensusEntries entries of
	// about maxCensusID + 40 bytes.
	maxCensusFrame = maxCensusEntries * (maxCensusID + 48)
	// censusEvery is how often a superpeer reports its load and exchanges
	// its table with another superpeer.
	censusEvery = 5 * time.Second

	dropCensusDecode = "census-decode" // a digest that does not decode, or over the caps
	dropCensusLost   = "census-lost"   // the stream failed before a whole digest came
	dropCensusWrite  = "census-write"  // the other side went away mid-exchange
	dropCensusOver   = "census-over"   // a report of more peers than a superpeer's capacity lets it serve (the entry is skipped)
	dropCensusRate   = "census-rate"   // a digest past the peer's rate (WithRateLimit), reset unread
)

// censusBox is a peer's census behind a lock: the selector's loop, the
// attach protocol's handlers and the census streams all reach it. changed
// is signalled (without blocking) whenever the value held changes.
type censusBox struct {
	mu      sync.Mutex
	c       *census.Census
	changed chan struct{}
	// maxPeers is the most peers one report may account for: a superpeer
	// and the Capacity clients it may serve (0: no bound). A report of
	// more is a lie that would inflate the count.
	maxPeers int
}

func newCensusBox(f float64, self peer.ID, initial, capacity int, tm censusTiming) (*censusBox, error) {
	c, err := census.New(census.Config{Fraction: f, HoldDown: tm.holdDown, Expire: tm.expire, ConfirmFor: tm.confirmFor, Group: groupOf()}, string(self), census.Value{S: initial})
	if err != nil {
		return nil, err
	}
	b := &censusBox{c: c, changed: make(chan struct{}, 1)}
	if capacity > 0 {
		b.maxPeers = capacity + 1
	}
	return b, nil
}

// groupOf is the census's Config.Group for the prefix method: a reporter
// (a peer ID) stands for its group of the exact code of S. The census calls
// it under the box's lock, which guards the cached code too.
func groupOf() func(id string, s int) int {
	var code Prefix
	cached := 0
	return func(id string, s int) int {
		if s != cached {
			c, err := Exact(s)
			if err != nil {
				return -1
			}
			code, cached = c, s
		}
		return code.Group(dht.KeyOf(peer.ID(id)))
	}
}

func (b *censusBox) value() census.Value {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.c.Value()
}

func (b *censusBox) signal() {
	select {
	case b.changed <- struct{}{}:
	default:
	}
}

// observe takes a value heard from another peer.
func (b *censusBox) observe(v census.Value) {
	if v.S < 1 {
		return
	}
	b.mu.Lock()
	took := b.c.Observe(time.Now(), v)
	b.mu.Unlock()
	if took {
		b.signal()
	}
}

// digest is what this peer sends in an exchange.
func (b *censusBox) digest(now time.Time) *pb.CensusDigest {
	b.mu.Lock()
	defer b.mu.Unlock()
	v := b.c.Value()
	d := &pb.CensusDigest{S: uint32(min(v.S, math.MaxUint32)), Version: v.Version}
	for _, e := range b.c.Digest(now) {
		if len(d.Entries) == maxCensusEntries {
			break
		}
		d.Entries = append(d.Entries, &pb.CensusEntry{Id: []byte(e.ID), Peers: uint32(min(e.Peers, math.MaxUint32)), Share: e.Share, Version: e.Version, Seq: e.Seq, Estimate: e.Estimate})
	}
	return d
}

// errCensusDigest is a digest over the caps or with an impossible value.
var errCensusDigest = errors.New("superpeer: bad census digest")

// merge takes another superpeer's digest; over counts the reports it
// skipped for accounting for more peers than a superpeer can serve.
func (b *censusBox) merge(now time.Time, d *pb.CensusDigest) (over int, err error) {
	if d.S < 1 || len(d.Entries) > maxCensusEntries {
		return 0, errCensusDigest
	}
	es := make([]census.Entry, 0, len(d.Entries))
	for _, e := range d.Entries {
		if len(e.Id) == 0 || len(e.Id) > maxCensusID {
			return 0, errCensusDigest
		}
		if b.maxPeers > 0 && int64(e.Peers) > int64(b.maxPeers) {
			over++
			continue
		}
		// The census ignores what it cannot use (no peers, a share outside
		// (0, 1], a NaN or absurd estimate): it counts no report it cannot
		// trust.
		es = append(es, census.Entry{ID: string(e.Id), Peers: int(e.Peers), Share: e.Share, Version: e.Version, Seq: e.Seq, Estimate: e.Estimate})
	}
	b.mu.Lock()
	before := b.c.Value()
	b.c.Merge(now, census.Value{S: int(d.S), Version: d.Version}, es)
	after := b.c.Value()
	b.mu.Unlock()
	if after != before {
		b.signal()
	}
	return over, nil
}

// decodeCensusDigest reads one digest frame and checks it.
func decodeCensusDigest(r io.Reader, d *pb.CensusDigest) error {
	if err := frame.Read(r, maxCensusFrame, d); err != nil {
		return err
	}
	if d.S < 1 || len(d.Entries) > maxCensusEntries {
		return errCensusDigest
	}
	for _, e := range d.Entries {
		if len(e.Id) == 0 || len(e.Id) > maxCensusID {
			return errCensusDigest
		}
	}
	return nil
}

// handleCensus answers an exchange: it merges the asker's digest and
// answers with this peer's (a peer that is no superpeer has no reports to
// send, but its value).
func (a *Attach) handleCensus(b *censusBox) network.StreamHandler {
	return func(s network.Stream) {
		defer s.Close()
		if !a.censusLimit.Allow(a.opts.Now(), string(s.Conn().RemotePeer())) {
			a.drop(dropCensusRate)
			_ = s.Reset()
			return
		}
		_ = s.SetDeadline(time.Now().Add(attachStreamTimout))
		var d pb.CensusDigest
		if a.read(s, func(r io.Reader) error { return decodeCensusDigest(r, &d) }, dropCensusLost, dropCensusDecode) != nil {
			return
		}
		now := time.Now()
		if over, _ := b.merge(now, &d); over > 0 {
			a.drops.Add(dropCensusOver, uint64(over))
		}
		out := b.digest(now)
		if err := pbio.NewDelimitedWriter(s).WriteMsg(out); err != nil {
			a.drop(dropCensusWrite)
			_ = s.Reset()
			return
		}
		a.Stats.BytesOut.Add(uint64(proto.Size(out)))
		var one [1]byte
		_, _ = s.Read(one[:])
	}
}

// exchangeCensus sends this peer's digest to p and merges the answer.
func (a *Attach) exchangeCensus(ctx context.Context, id protocol.ID, p peer.ID, b *censusBox) error {
	ctx, cancel := context.WithTimeout(ctx, attachStreamTimout)
	defer cancel()
	s, err := a.h.NewStream(ctx, p, id)
	if err != nil {
		return err
	}
	defer s.Close()
	stop := context.AfterFunc(ctx, func() { _ = s.Reset() })
	defer stop()
	_ = s.SetDeadline(time.Now().Add(attachStreamTimout))
	out := b.digest(time.Now())
	if err := pbio.NewDelimitedWriter(s).WriteMsg(out); err != nil {
		_ = s.Reset()
		return err
	}
	a.Stats.BytesOut.Add(uint64(proto.Size(out)))
	var d pb.CensusDigest
	if err := a.read(s, func(r io.Reader) error { return decodeCensusDigest(r, &d) }, dropCensusLost, dropCensusDecode); err != nil {
		return err
	}
	over, err := b.merge(time.Now(), &d)
	if over > 0 {
		a.drops.Add(dropCensusOver, uint64(over))
	}
	return err
}
