package superpeer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-msgio/pbio"
	"google.golang.org/protobuf/proto"

	"github.com/superpeer-overlay/superpeer/dht"
	"github.com/superpeer-overlay/superpeer/internal/census"
	"github.com/superpeer-overlay/superpeer/internal/counters"
	"github.com/superpeer-overlay/superpeer/internal/frame"
	"github.com/superpeer-overlay/superpeer/internal/limits"
	"github.com/superpeer-overlay/superpeer/superpeer/pb"
)

// attachProtocol is the attach protocol's ID under prefix:
// /superpeer/attach/1.0.0 under dht.DefaultProtocolPrefix.
func attachProtocol(prefix protocol.ID) protocol.ID { return prefix + "/attach/1.0.0" }

const (
	// maxAttachFrame caps a request or an answer; a coordinate of 16
	// dimensions is 150 bytes.
	maxAttachFrame = 512
	// maxCoordDims refuses absurd coordinates.
	maxCoordDims       = 16
	attachStreamTimout = 5 * time.Second
)

// Drop reasons of the attach protocol.
const (
	dropAttachDecode = "decode"      // not a protobuf, or over the cap
	dropAttachCoord  = "bad-coord"   // NaN/Inf or too many dimensions
	dropAttachAnswer = "bad-answer"  // an answer that does not decode
	dropAttachHint   = "bad-hint"    // a hint that is not a peer ID
	dropAttachStatus = "bad-status"  // an unknown status
	dropAttachWrite  = "write-error" // the other side went away mid-exchange
	dropAttachLost   = "lost"        // the stream failed before a whole frame came
	dropAttachRate   = "rate"        // a request past the peer's rate (WithRateLimit), reset unread
	// A regret over what the superpeer can check (SetRegretBound), taken
	// at the bound: the request is answered, the claim refused.
	dropAttachRegret = "regret-capped"
	// A notice that the sender dropped this peer, from a peer that is not
	// this peer's superpeer (late, or made up): nothing changes.
	dropAttachStale = "stale-notice"
)

// defaultRateBurst is the per-peer bucket of the attach and census
// protocols, and defaultRatePerTTL the requests a TTL it refills
// (WithRateLimit).
const (
	defaultRateBurst  = 8
	defaultRatePerTTL = 8
)

// Status of an attach answer.
type Status int

const (
	Accepted     Status = Status(pb.AttachResponse_ACCEPTED)
	Full         Status = Status(pb.AttachResponse_FULL)
	NotSuperpeer Status = Status(pb.AttachResponse_NOT_SUPERPEER)
)

func (s Status) String() string { return pb.AttachResponse_Status(s).String() }

// Answer is a superpeer's reply to an attach request.
type Answer struct {
	Status   Status
	Reason   string
	Hint     peer.ID
	Load     int
	Capacity int
	TTL      time.Duration
}

// DefaultDisplace is WithDisplace's default: the margin by which
// a newcomer's regret must exceed a served client's before a full
// superpeer takes it in that client's place.
const DefaultDisplace = 2 * time.Millisecond

// AttachStats counts the protocol's traffic and refusals.
type AttachStats struct {
	Sent, Served, Accepted, RefusedFull, RefusedNotSuperpeer atomic.Uint64
	// Displaced counts clients this superpeer dropped for a newcomer that
	// loses more without it (WithDisplace).
	Displaced atomic.Uint64
	// Notified counts the notices this superpeer sent to clients it
	// dropped; Heard those this peer acted on, from its own superpeer.
	Notified, Heard   atomic.Uint64
	BytesIn, BytesOut atomic.Uint64
}

// Attach runs the attach protocol on one peer: as a superpeer it keeps its
// clients (at most Capacity, each dropped when it falls silent for TTL); as a
// client it asks superpeers to serve it. Which of the two it is comes from
// the selector through SetRole.
type Attach struct {
	h     host.Host
	opts  attachOptions
	proto protocol.ID // the protocol ID, under opts.ProtocolPrefix

	role       atomic.Pointer[func() (Role, peer.ID)]
	reportRole atomic.Pointer[func() Role]
	onRefused  atomic.Pointer[func()]
	onDropped  atomic.Pointer[func(peer.ID)]
	// census, when the superpeer count follows a fraction: its value
	// travels on every request and answer.
	census atomic.Pointer[censusBox]

	mu       sync.Mutex
	table    *AttachTable // the clients served, behind mu
	upstream peer.ID      // the superpeer that last accepted this peer

	drops       counters.Set
	stopMetrics func()
	// limit and censusLimit are the per-peer buckets of the attach and
	// census protocols (WithRateLimit; nil: no limit).
	limit, censusLimit *limits.PerPeer

	// notices are the goroutines telling dropped clients, stopped by
	// cancel and awaited by Close; closed (behind mu) starts no more.
	notices sync.WaitGroup
	closed  bool
	ctx     context.Context
	cancel  context.CancelFunc

	Stats AttachStats
}

// Connection-manager protection tags: a superpeer keeps its connections to
// the clients it serves, and a client the one to its superpeer, so that
// trimming (go-libp2p's connection manager) never cuts an attachment and
// costs a redial on every renewal.
const (
	protectClient   = "superpeer/client"
	protectUpstream = "superpeer/upstream"
)

// ClientCoord is the network coordinate a client sent with its last
// request (seconds; Vec nil if it sent none).
type ClientCoord struct {
	Vec    []float64
	Height float64
}

// ClientRequest is what a client asks of a superpeer.
type ClientRequest struct {
	// Leave ends the attachment instead of making or renewing it.
	Leave bool
	// Coord and Height are the client's network coordinate (seconds), if
	// it has one.
	Coord  []float64
	Height float64
	// Regret is what the client loses if refused: the RTT of the next
	// superpeer it would ask minus this one's; negative if it would gain by
	// going (0: not said; a newcomer saying none never displaces anyone;
	// 2^31−1 µs, about 36 min: no other choice). Sent in whole microseconds
	// within ±(2^31−1) µs.
	Regret time.Duration
}

// maxRegret is the largest regret a request carries (the wire's int32
// microseconds, about 36 minutes): a client with no other superpeer to ask
// says it.
const maxRegret = time.Duration(math.MaxInt32) * time.Microsecond

// forgetLocked drops client p and its connection protection. Lock held.
func (a *Attach) forgetLocked(p peer.ID) {
	if a.table.Leave(p) {
		a.h.ConnManager().Unprotect(p, protectClient)
	}
}

// setUpstream records sp as this peer's superpeer ("" for none) and moves
// the upstream protection to it; if only is set, only in place of only. It
// says whether the superpeer changed.
func (a *Attach) setUpstream(sp, only peer.ID) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if sp == a.upstream || (only != "" && a.upstream != only) {
		return false
	}
	if a.upstream != "" {
		a.h.ConnManager().Unprotect(a.upstream, protectUpstream)
	}
	a.upstream = sp
	if sp != "" {
		a.h.ConnManager().Protect(sp, protectUpstream)
	}
	return true
}

// NewAttach registers the attach protocol on h. Of the options it takes
// the capacity, TTL, displacement, clock, protocol prefix and registerer.
func NewAttach(h host.Host, opts ...Option) (*Attach, error) {
	o, err := applyOptions(opts)
	if err != nil {
		return nil, err
	}
	return newAttach(h, o.Attach)
}

func newAttach(h host.Host, opts attachOptions) (*Attach, error) {
	if opts.TTL == 0 {
		opts.TTL = defaultAttachTTL
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.ProtocolPrefix == "" {
		opts.ProtocolPrefix = dht.DefaultProtocolPrefix
	}
	a := &Attach{h: h, opts: opts, proto: attachProtocol(opts.ProtocolPrefix), table: NewAttachTable(opts.Capacity, opts.TTL, opts.Displace)}
	a.ctx, a.cancel = context.WithCancel(context.Background())
	if !opts.rateSet {
		opts.Rate, opts.Burst = max(1, defaultRatePerTTL/opts.TTL.Seconds()), defaultRateBurst
	}
	a.limit = limits.NewPerPeer(opts.Rate, opts.Burst, 0)
	a.censusLimit = limits.NewPerPeer(opts.Rate, opts.Burst, 0)
	unknown := func() (Role, peer.ID) { return Unknown, "" }
	a.role.Store(&unknown)
	var err error
	if a.stopMetrics, err = counters.Register(opts.Registerer, attachFamilies, a.report); err != nil {
		return nil, fmt.Errorf("superpeer: attach metrics: %w", err)
	}
	h.SetStreamHandler(a.proto, a.handle)
	return a, nil
}

// SetRegretBound sets the most regret this superpeer takes from a client
// that sends coord (AttachTable.Bound); a larger claim is taken at the
// bound and counted under the drop reason "regret-capped". The selector
// that knows where the superpeers are sets it; nil takes every regret as
// said. bound is called with the protocol's lock held.
func (a *Attach) SetRegretBound(bound func(coord ClientCoord) time.Duration) {
	a.mu.Lock()
	a.table.Bound = bound
	a.mu.Unlock()
}

// SetRole tells the protocol where the peer's role comes from.
func (a *Attach) SetRole(role func() (Role, peer.ID)) { a.role.Store(&role) }

// onRefusedAsNonSuperpeer is called when a peer asks this one to serve it
// while it is not a superpeer: a hint that this peer's view may be stale.
func (a *Attach) onRefusedAsNonSuperpeer(f func()) { a.onRefused.Store(&f) }

// OnDropped sets f, called when this peer's superpeer sp says it serves
// this peer no longer (it took another client in its place): the selector
// looks for another superpeer at once instead of at its next renewal. By
// then the protocol has forgotten sp as this peer's superpeer. f must not
// block.
func (a *Attach) OnDropped(f func(sp peer.ID)) { a.onDropped.Store(&f) }

// Capacity is C (0: unbounded).
func (a *Attach) Capacity() int { return a.opts.Capacity }

// TTL is the attachment lifetime.
func (a *Attach) TTL() time.Duration { return a.opts.TTL }

// expireLocked forgets clients silent for longer than TTL and their
// connection protection. Lock held.
func (a *Attach) expireLocked(now time.Time) {
	for _, p := range a.table.expire(now) {
		a.h.ConnManager().Unprotect(p, protectClient)
	}
}

// Clients are the peers this superpeer serves now, sorted.
func (a *Attach) Clients() []peer.ID {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.expireLocked(a.opts.Now())
	return a.table.ids()
}

// ClientCoords are the coordinates the clients this superpeer serves sent
// with their last request (validated: finite, at most maxCoordDims), for
// those that sent one.
func (a *Attach) ClientCoords() map[peer.ID]ClientCoord {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.expireLocked(a.opts.Now())
	return a.table.coords()
}

// Load is how many clients this superpeer serves now.
func (a *Attach) Load() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.expireLocked(a.opts.Now())
	return a.table.load()
}

// DropClients forgets every client (the peer stopped being a superpeer).
func (a *Attach) DropClients() {
	a.mu.Lock()
	for _, p := range a.table.dropAll() {
		a.h.ConnManager().Unprotect(p, protectClient)
	}
	a.mu.Unlock()
}

// Drops returns the refused-frame counters by reason: "decode",
// "bad-coord", "bad-answer", "bad-hint", "bad-status", "write-error",
// "lost", "rate" (WithRateLimit), "regret-capped" (SetRegretBound: a
// claim refused, the request answered), "stale-notice" (a notice that the
// sender dropped this peer, from a peer that is not its superpeer); and the
// census protocol's,
// "census-…".
func (a *Attach) Drops() map[string]uint64 { return a.drops.Snapshot() }

func (a *Attach) drop(reason string) { a.drops.Add(reason, 1) }

// read decodes one frame from s; a failure is counted under lost (the
// stream failed before a whole frame came) or bad (it did not decode, or
// did not pass decode's checks) and resets the stream.
func (a *Attach) read(s network.Stream, decode func(io.Reader) error, lost, bad string) error {
	err := decode(s)
	if err != nil {
		if errors.Is(err, frame.ErrStreamFailed) {
			a.drop(lost)
		} else {
			a.drop(bad)
		}
		_ = s.Reset()
	}
	return err
}

// Close removes the protocol handler and the metrics, and stops the
// notices under way.
func (a *Attach) Close() {
	a.h.RemoveStreamHandler(a.proto)
	a.mu.Lock()
	a.closed = true
	a.mu.Unlock()
	a.cancel()
	a.notices.Wait()
	a.stopMetrics()
}

// notify tells client p, dropped for another, that this superpeer serves
// it no longer, in the background and best effort: without it p learns at
// its next renewal, up to a third of the TTL later, and meanwhile counts
// itself served. Lock held.
func (a *Attach) notify(p peer.ID) {
	if a.closed {
		return
	}
	a.Stats.Notified.Add(1)
	a.notices.Add(1)
	go func() {
		defer a.notices.Done()
		_, _ = a.exchange(a.ctx, p, &pb.AttachRequest{Dropped: true})
	}()
}

// heardDropped is a notice from sp that it dropped this peer: if sp is
// this peer's superpeer, it is no longer, and the selector hears of it.
func (a *Attach) heardDropped(sp peer.ID) {
	if sp == "" || !a.setUpstream("", sp) {
		a.drop(dropAttachStale)
		return
	}
	a.Stats.Heard.Add(1)
	if f := a.onDropped.Load(); f != nil {
		(*f)(sp)
	}
}

func validCoord(vec []float64, height float64) bool {
	if len(vec) > maxCoordDims || math.IsNaN(height) || math.IsInf(height, 0) || height < 0 {
		return false
	}
	for _, v := range vec {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return false
		}
	}
	return true
}

// decide is the superpeer side of one request: the table decides, decide
// answers, counts and moves the connection protection.
func (a *Attach) decide(from peer.ID, req *pb.AttachRequest) *pb.AttachResponse {
	if req.Dropped {
		a.heardDropped(from)
		return &pb.AttachResponse{Status: pb.AttachResponse_ACCEPTED, Reason: "noted", Capacity: uint32(a.opts.Capacity), TtlMs: uint32(a.opts.TTL / time.Millisecond)}
	}
	role, sp := (*a.role.Load())()
	now := a.opts.Now()
	resp := &pb.AttachResponse{Capacity: uint32(a.opts.Capacity), TtlMs: uint32(a.opts.TTL / time.Millisecond)}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.expireLocked(now)
	if req.Leave {
		a.forgetLocked(from)
		resp.Status = pb.AttachResponse_ACCEPTED
		resp.Reason = "left"
		resp.Load = uint32(a.table.load())
		return resp
	}
	if role != Superpeer {
		resp.Status = pb.AttachResponse_NOT_SUPERPEER
		resp.Reason = "not a superpeer"
		if sp != "" && sp != a.h.ID() {
			resp.Hint = []byte(sp)
		}
		a.Stats.RefusedNotSuperpeer.Add(1)
		return resp
	}
	regret := time.Duration(req.RegretUs) * time.Microsecond // ±maxRegret
	fresh, capped := !a.table.serves(from), a.table.Capped
	st, victim := a.table.Admit(now, from, regret, ClientCoord{Vec: req.Coord, Height: req.Height})
	if a.table.Capped != capped {
		a.drop(dropAttachRegret)
	}
	if st == Full {
		resp.Status = pb.AttachResponse_FULL
		resp.Reason = fmt.Sprintf("serving %d of %d clients", a.table.load(), a.opts.Capacity)
		resp.Load = uint32(a.table.load())
		a.Stats.RefusedFull.Add(1)
		return resp
	}
	if victim != "" {
		a.h.ConnManager().Unprotect(victim, protectClient)
		a.Stats.Displaced.Add(1)
		a.notify(victim)
	}
	if fresh {
		a.h.ConnManager().Protect(from, protectClient)
	}
	resp.Status = pb.AttachResponse_ACCEPTED
	resp.Load = uint32(a.table.load())
	a.Stats.Accepted.Add(1)
	return resp
}

func (a *Attach) handle(s network.Stream) {
	defer s.Close()
	if !a.limit.Allow(a.opts.Now(), string(s.Conn().RemotePeer())) {
		a.drop(dropAttachRate)
		_ = s.Reset()
		return
	}
	_ = s.SetDeadline(time.Now().Add(attachStreamTimout))
	var req pb.AttachRequest
	if a.read(s, func(r io.Reader) error { return frame.Read(r, maxAttachFrame, &req) }, dropAttachLost, dropAttachDecode) != nil {
		return
	}
	a.Stats.BytesIn.Add(uint64(proto.Size(&req)))
	if !validCoord(req.Coord, req.Height) {
		a.drop(dropAttachCoord)
		_ = s.Reset()
		return
	}
	a.Stats.Served.Add(1)
	b := a.census.Load()
	if b != nil {
		b.observe(census.Value{S: int(req.CensusS), Version: req.CensusVersion})
	}
	resp := a.decide(s.Conn().RemotePeer(), &req)
	if b != nil {
		v := b.value()
		resp.CensusS, resp.CensusVersion = uint32(min(v.S, math.MaxUint32)), v.Version
	}
	if resp.Status == pb.AttachResponse_NOT_SUPERPEER {
		if f := a.onRefused.Load(); f != nil {
			(*f)()
		}
	}
	if err := pbio.NewDelimitedWriter(s).WriteMsg(resp); err != nil {
		a.drop(dropAttachWrite)
		_ = s.Reset()
		return
	}
	a.Stats.BytesOut.Add(uint64(proto.Size(resp)))
	// Let the client close first: mocknet delivers a closing writer's data
	// ahead of the link delay.
	var one [1]byte
	_, _ = s.Read(one[:])
}

// errBadAnswer is an answer that did not decode or validate.
var errBadAnswer = errors.New("superpeer: bad attach answer")

// Request asks sp to serve this peer (or, with leave, to stop), saying no
// regret.
func (a *Attach) Request(ctx context.Context, sp peer.ID, leave bool, coord []float64, height float64) (Answer, error) {
	return a.RequestWith(ctx, sp, ClientRequest{Leave: leave, Coord: coord, Height: height})
}

// RequestWith asks sp to serve this peer (or, with r.Leave, to stop).
func (a *Attach) RequestWith(ctx context.Context, sp peer.ID, r ClientRequest) (Answer, error) {
	leave := r.Leave
	a.Stats.Sent.Add(1)
	req := &pb.AttachRequest{Leave: leave, Coord: r.Coord, Height: r.Height, RegretUs: regretMicros(r.Regret)}
	b := a.census.Load()
	if b != nil {
		v := b.value()
		req.CensusS, req.CensusVersion = uint32(min(v.S, math.MaxUint32)), v.Version
	}
	resp, err := a.exchange(ctx, sp, req)
	if err != nil {
		return Answer{}, err
	}
	ans, err := a.decodeAnswer(resp, sp)
	if err != nil {
		return ans, err
	}
	if b != nil {
		b.observe(census.Value{S: int(resp.CensusS), Version: resp.CensusVersion})
	}
	switch {
	case ans.Status == Accepted && !leave:
		a.setUpstream(sp, "")
	default: // left, or refused: no longer this peer's superpeer
		a.setUpstream("", sp)
	}
	return ans, nil
}

// exchange sends req to sp on a stream of its own and reads the answer.
func (a *Attach) exchange(ctx context.Context, sp peer.ID, req *pb.AttachRequest) (*pb.AttachResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, attachStreamTimout)
	defer cancel()
	s, err := a.h.NewStream(ctx, sp, a.proto)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	stop := context.AfterFunc(ctx, func() { _ = s.Reset() })
	defer stop()
	_ = s.SetDeadline(time.Now().Add(attachStreamTimout))
	if err := pbio.NewDelimitedWriter(s).WriteMsg(req); err != nil {
		_ = s.Reset()
		return nil, err
	}
	a.Stats.BytesOut.Add(uint64(proto.Size(req)))
	var resp pb.AttachResponse
	if err := frame.Read(s, maxAttachFrame, &resp); err != nil {
		_ = s.Reset()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(err, frame.ErrStreamFailed) {
			a.drop(dropAttachLost)
			return nil, fmt.Errorf("superpeer: attach answer from %s: %w", sp, err)
		}
		a.drop(dropAttachAnswer)
		return nil, fmt.Errorf("%w from %s: %v", errBadAnswer, sp, err)
	}
	a.Stats.BytesIn.Add(uint64(proto.Size(&resp)))
	return &resp, nil
}

func (a *Attach) decodeAnswer(resp *pb.AttachResponse, sp peer.ID) (Answer, error) {
	ans := Answer{
		Status:   Status(resp.Status),
		Reason:   resp.Reason,
		Load:     int(resp.Load),
		Capacity: int(resp.Capacity),
		TTL:      time.Duration(resp.TtlMs) * time.Millisecond,
	}
	if _, ok := pb.AttachResponse_Status_name[int32(resp.Status)]; !ok {
		a.drop(dropAttachStatus)
		return Answer{}, fmt.Errorf("%w from %s: status %d", errBadAnswer, sp, resp.Status)
	}
	if len(resp.Hint) > 0 {
		h, err := peer.IDFromBytes(resp.Hint)
		if err != nil {
			a.drop(dropAttachHint)
		} else {
			ans.Hint = h
		}
	}
	return ans, nil
}

// regretMicros is a regret on the wire: whole microseconds (rounded toward
// zero) within ±maxRegret.
func regretMicros(d time.Duration) int32 {
	switch {
	case d >= maxRegret:
		return math.MaxInt32
	case d <= -maxRegret:
		return -math.MaxInt32
	}
	return int32(d / time.Microsecond)
}
