// Package flood floods a peer on real TCP loopback hosts and measures
// what it costs the peer and its clients: one attacker host opens streams
// of one of our protocols as fast as it can (Workers at once) for a
// bounded time per Kind — garbage bytes, oversized frames, or valid
// frames that are useless to the victim (attach and leave in a loop,
// surveys, move offers, census digests, Vivaldi requests) — while honest
// clients renew their attachments with the victim every TTL/3.
//
// The victim stands in for `peer run`: a TCP host with peer run's
// resource manager (internal/peerhost), a dht.Node and the selection
// method of the kind (repel with its own Vivaldi service; for census
// digests prefix with a fraction, the only method that speaks the census
// protocol). All hosts live in this process, so the memory figures are
// the whole process's (victim, clients and attacker), an upper bound on
// the victim's, and the attacker shares the machine's cores with it.
package flood

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"

	"github.com/superpeer-overlay/superpeer/dht"
	"github.com/superpeer-overlay/superpeer/experiments/swarm"
	"github.com/superpeer-overlay/superpeer/internal/limits"
	"github.com/superpeer-overlay/superpeer/internal/peerhost"
	"github.com/superpeer-overlay/superpeer/repel"
	"github.com/superpeer-overlay/superpeer/superpeer"
	"github.com/superpeer-overlay/superpeer/vivaldi"
)

// Kind is what the attacker sends.
type Kind string

const (
	// Garbage: random bytes (64 B to 1 KiB) on every protocol of the
	// victim's in turn.
	Garbage Kind = "garbage"
	// Oversized: a length prefix of 1 MiB, past every protocol's cap,
	// and 512 bytes, on every protocol in turn.
	Oversized Kind = "oversized"
	// AttachChurn: attach requests and leaves, one after the other.
	AttachChurn Kind = "attach-churn"
	// Survey: SURVEY frames naming the attacker as the holder of token 0
	// (the victim holds it): each is a step of the victim's model, and
	// the victim declines it on a stream of its own to the attacker.
	Survey Kind = "survey"
	// Move: MOVE frames offering the victim the token version it holds,
	// which it acknowledges.
	Move Kind = "move"
	// Census: census digests carrying the attacker's own report, which
	// the victim merges and answers with its own digest.
	Census Kind = "census"
	// Probe: Vivaldi requests asking for 8 neighbours, which the victim
	// answers with its coordinate, neighbours and gossip.
	Probe Kind = "probe"
	// Stall: streams on every protocol in turn that send one byte of a
	// length prefix and then nothing, held open (up to 64 a worker)
	// until the flood ends: each holds a handler until its deadline.
	Stall Kind = "stall"
	// Silent: streams that send nothing at all, not even the protocol's
	// name, held open like Stall's: the victim holds each in its
	// transient scope until protocol negotiation times out.
	Silent Kind = "silent"
	// Forge: announcements of the token the victim holds, each signed by
	// the attacker as its own holder at a higher epoch (64 of them, one
	// epoch more each), on the announce protocol: valid frames that,
	// without the guard (repel.Config.Guard, one of the defences), take
	// the token at the first. Last, as it may leave the victim without
	// its token.
	Forge Kind = "forge"
)

// Kinds are every kind, in the order Run floods them.
var Kinds = []Kind{Garbage, Oversized, AttachChurn, Survey, Move, Census, Probe, Stall, Silent, Forge}

// ParseKind is the kind named s.
func ParseKind(s string) (Kind, error) {
	for _, k := range Kinds {
		if string(k) == s {
			return k, nil
		}
	}
	return "", fmt.Errorf("flood: unknown kind %q", s)
}

// Config is one run: every kind in turn against one victim per method.
type Config struct {
	Kinds []Kind
	// Duration is how long each kind floods (default 5 s).
	Duration time.Duration
	// Settle is how long after a flood the victim's counters are read,
	// for the streams in flight to end (default 500 ms).
	Settle time.Duration
	// Clients are the honest clients attached to the victim (default 3).
	Clients int
	// Workers are the attacker's streams in flight at once (default 64).
	Workers int
	// TTL is the victim's attachment lifetime (default 1.5 s); the
	// clients renew every TTL/3.
	TTL time.Duration
	// Defences: the victim runs with peer run's resource-manager limits
	// for our protocols, the per-peer rate limits (the default of every
	// constructor) and the token guard (repel.Config.Guard); without,
	// go-libp2p's default limits, no rate limits and no guard.
	Defences bool
	Seed     int64
	// Progress, if set, is told of each kind as it starts.
	Progress func(k Kind)
}

func (c *Config) defaults() {
	if len(c.Kinds) == 0 {
		c.Kinds = Kinds
	}
	if c.Duration <= 0 {
		c.Duration = 5 * time.Second
	}
	if c.Settle <= 0 {
		c.Settle = 500 * time.Millisecond
	}
	if c.Clients <= 0 {
		c.Clients = 3
	}
	if c.Workers <= 0 {
		c.Workers = 64
	}
	if c.TTL <= 0 {
		c.TTL = 1500 * time.Millisecond
	}
}

// Result is one kind's flood.
type Result struct {
	Kind     Kind `json:"kind"`
	Defences bool `json:"defences"`
	// Victim is the victim's method: repel, or prefix (census).
	Victim    string   `json:"victim"`
	Protocols []string `json:"protocols"`
	Seconds   float64  `json:"seconds"`
	// FramesSent are the frames the attacker wrote on a stream it opened;
	// FramesPerSecond their rate. StreamsFailed are the streams it could
	// not open or write; Answered those on which the victim wrote back.
	FramesSent      uint64  `json:"frames_sent"`
	FramesPerSecond float64 `json:"frames_per_second"`
	StreamsFailed   uint64  `json:"streams_failed"`
	Answered        uint64  `json:"answered"`
	// Reflected are the streams the victim opened to the attacker during
	// the flood (a declined survey's report goes back on one).
	Reflected uint64 `json:"reflected"`
	// Dropped are the victim's refused frames by reason, summed over its
	// components (the dht, attach, Vivaldi and repel Drops), DroppedBy
	// the same by component/reason, and RcmgrRefused what its resource
	// manager refused, by scope (limits.Refusals), during the flood.
	Dropped      map[string]uint64 `json:"dropped"`
	DroppedBy    map[string]uint64 `json:"dropped_by"`
	DroppedTotal uint64            `json:"dropped_total"`
	RcmgrRefused map[string]uint64 `json:"rcmgr_refused"`
	// Renewals are the honest clients' renewals during the flood, and
	// RenewalsFailed those not accepted (an error, or a refusal);
	// RenewalsOK is true if there were some and none failed.
	// RenewalMaxMs is the slowest.
	Renewals       uint64  `json:"renewals"`
	RenewalsFailed uint64  `json:"renewals_failed"`
	RenewalsOK     bool    `json:"renewals_ok"`
	RenewalMaxMs   float64 `json:"renewal_max_ms"`
	// StillServing: the victim still served every honest client after the
	// flood (its attach table lists them).
	StillServing bool `json:"still_serving"`
	// The repel victim's token: whether it held one after the flood, and
	// how often during the flood it was fenced or refused a fresher
	// version as not its own hand-over (repel.EventUntraced).
	StillHolding bool   `json:"still_holding"`
	Fenced       uint64 `json:"fenced"`
	Untraced     uint64 `json:"untraced"`
	// The process's resident set (VmRSS; 0 off Linux), Go heap in use and
	// goroutines, sampled every 50 ms: before the flood and their peaks
	// during it and its settling.
	RSSBefore      uint64 `json:"rss_before_bytes"`
	PeakRSS        uint64 `json:"peak_rss_bytes"`
	HeapBefore     uint64 `json:"heap_before_bytes"`
	PeakHeap       uint64 `json:"peak_heap_bytes"`
	GoroutinesPeak int    `json:"peak_goroutines"`
}

const prefix = dht.DefaultProtocolPrefix

// The protocol IDs under the default prefix.
var (
	protoClosest  = prefix + "/kad/closest/1.0.0"
	protoAttach   = prefix + "/attach/1.0.0"
	protoCensus   = prefix + "/census/1.0.0"
	protoVivaldi  = prefix + "/vivaldi/1.0.0"
	protoAnnounce = prefix + "/repel/announce/1.0.0"
	protoMove     = prefix + "/repel/move/1.0.0"
	protoSurvey   = prefix + "/repel/survey/1.0.0"
)

// Run floods a victim with each of cfg's kinds in turn and returns one
// Result per kind. The kinds share a victim per method (built once,
// before the first kind that needs it).
func Run(ctx context.Context, cfg Config) ([]Result, error) {
	cfg.defaults()
	rng := rand.New(rand.NewSource(cfg.Seed))
	att, err := newAttacker(rng)
	if err != nil {
		return nil, err
	}
	defer att.close()
	victims := map[string]*victim{}
	defer func() {
		for _, v := range victims {
			v.close()
		}
	}()
	var out []Result
	for _, k := range cfg.Kinds {
		method := "repel"
		if k == Census {
			method = "prefix"
		}
		v := victims[method]
		if v == nil {
			if v, err = newVictim(ctx, method, cfg, rng); err != nil {
				return out, err
			}
			victims[method] = v
			if err := att.connect(ctx, v.h); err != nil {
				return out, err
			}
		}
		if cfg.Progress != nil {
			cfg.Progress(k)
		}
		r, err := flood(ctx, cfg, k, v, att, rng)
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
	return out, nil
}

// flood runs one kind against v.
func flood(ctx context.Context, cfg Config, k Kind, v *victim, att *attacker, rng *rand.Rand) (Result, error) {
	frames, err := att.frames(k, v, rng)
	if err != nil {
		return Result{}, err
	}
	r := Result{Kind: k, Defences: cfg.Defences, Victim: v.method}
	seen := map[protocol.ID]bool{}
	for _, f := range frames {
		if !seen[f.proto] {
			seen[f.proto] = true
			r.Protocols = append(r.Protocols, string(f.proto))
		}
	}
	debug.FreeOSMemory() // what earlier kinds left is not this one's
	mem := startSampler()
	drops0, refused0, reflected0 := v.drops(), v.refused.Snapshot(), att.reflected.Load()
	fenced0, untraced0 := v.tokenStats()
	win := v.clients.window()
	fctx, cancel := context.WithTimeout(ctx, cfg.Duration)
	start := time.Now()
	sent, failed, answered := att.flood(fctx, v.h.ID(), frames, cfg.Workers, k == Stall || k == Silent)
	cancel()
	r.Seconds = time.Since(start).Seconds()
	ren := v.clients.close(win)
	select {
	case <-ctx.Done():
		mem.stop()
		return r, ctx.Err()
	case <-time.After(cfg.Settle):
	}
	r.RSSBefore, r.HeapBefore = mem.rss0, mem.heap0
	r.PeakRSS, r.PeakHeap, r.GoroutinesPeak = mem.stop()
	r.FramesSent, r.StreamsFailed, r.Answered = sent, failed, answered
	r.FramesPerSecond = float64(sent) / r.Seconds
	r.Reflected = att.reflected.Load() - reflected0
	r.DroppedBy = delta(drops0, v.drops())
	r.Dropped = map[string]uint64{}
	for key, n := range r.DroppedBy {
		reason := key[strings.IndexByte(key, '/')+1:]
		r.Dropped[reason] += n
		r.DroppedTotal += n
	}
	r.RcmgrRefused = delta(refused0, v.refused.Snapshot())
	r.Renewals, r.RenewalsFailed, r.RenewalMaxMs = ren.ok+ren.failed, ren.failed, float64(ren.max)/float64(time.Millisecond)
	r.RenewalsOK = ren.ok > 0 && ren.failed == 0
	r.StillServing = v.serves(v.clients.ids())
	if v.rsel != nil {
		_, r.StillHolding = v.rsel.Held()
		fenced, untraced := v.tokenStats()
		r.Fenced, r.Untraced = fenced-fenced0, untraced-untraced0
	}
	return r, nil
}

// tokenStats are the repel victim's fencings and untraced refusals so
// far (zero for another victim).
func (v *victim) tokenStats() (fenced, untraced uint64) {
	if v.rsel == nil {
		return 0, 0
	}
	st := v.rsel.Stats()
	return st[repel.EventFenced.String()], st[repel.EventUntraced.String()]
}

// delta is after − before for every counter that grew.
func delta(before, after map[string]uint64) map[string]uint64 {
	out := map[string]uint64{}
	for k, v := range after {
		if v > before[k] {
			out[k] = v - before[k]
		}
	}
	return out
}

// newHost is a TCP host on loopback with key and the resource manager
// mgr (nil: go-libp2p's default).
func newHost(key crypto.PrivKey, mgr network.ResourceManager) (host.Host, error) {
	opts := []libp2p.Option{
		libp2p.Identity(key), libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"),
		libp2p.NoTransports, libp2p.Transport(tcp.NewTCPTransport),
	}
	if mgr != nil {
		opts = append(opts, libp2p.ResourceManager(mgr))
	}
	return libp2p.New(opts...)
}

func newKey(rng *rand.Rand) (crypto.PrivKey, error) {
	k, _, err := crypto.GenerateEd25519Key(rng)
	return k, err
}

// victim is the flooded peer and its honest clients.
type victim struct {
	method  string
	h       host.Host
	node    *dht.Node
	viv     *vivaldi.Service   // repel
	rsel    *repel.Selector    // repel
	dead    time.Duration      // repel: its DeadAfter
	psel    superpeer.Selector // prefix
	attach  *superpeer.Attach
	refused *limits.Refusals
	clients *clients
	cancel  context.CancelFunc
}

// repelConfig is the victim's token method: one token, minted and settled
// within a second of the start (no other peer runs the method).
func repelConfig() (repel.Config, error) {
	c := repel.LocalConfig()
	c.Tokens = 1
	c.AnnounceInterval = 250 * time.Millisecond
	c.MovingAnnounceInterval = 200 * time.Millisecond
	c.DeadAfter = time.Second
	c.SettleAfter = 300 * time.Millisecond
	return c, c.Validate()
}

func newVictim(ctx context.Context, method string, cfg Config, rng *rand.Rand) (*victim, error) {
	v := &victim{method: method, refused: &limits.Refusals{}}
	ctx, v.cancel = context.WithCancel(ctx)
	ok := false
	defer func() {
		if !ok {
			v.close()
		}
	}()
	mgr, err := peerhost.ResourceManager(v.refused, false, !cfg.Defences)
	if err != nil {
		return nil, err
	}
	key, err := newKey(rng)
	if err != nil {
		return nil, err
	}
	if v.h, err = newHost(key, mgr); err != nil {
		return nil, err
	}
	if v.node, err = dht.New(ctx, v.h); err != nil {
		return nil, err
	}
	attOpts := []superpeer.Option{superpeer.WithTTL(cfg.TTL)}
	if !cfg.Defences {
		attOpts = append(attOpts, superpeer.WithRateLimit(0, 0))
	}
	switch method {
	case "repel":
		rc, err := repelConfig()
		if err != nil {
			return nil, err
		}
		rc.Guard = cfg.Defences
		v.dead = rc.DeadAfter
		vo := []vivaldi.Option{vivaldi.WithInterval(time.Second), vivaldi.WithSeed(rng.Int63())}
		ro := []repel.Option{repel.WithConfig(rc), repel.WithSeed(uint64(rng.Int63())), repel.WithAttach(attOpts...)}
		if !cfg.Defences {
			vo = append(vo, vivaldi.WithRateLimit(0, 0))
			ro = append(ro, repel.WithRateLimit(0, 0))
		}
		if v.viv, err = vivaldi.NewService(v.h, vo...); err != nil {
			return nil, err
		}
		if v.rsel, err = repel.NewSelector(v.node, append(ro, repel.WithVivaldi(v.viv))...); err != nil {
			return nil, err
		}
		if err := v.rsel.Start(ctx); err != nil {
			return nil, err
		}
		v.attach = v.rsel.Attach()
	case "prefix":
		ps, err := superpeer.NewPrefix(v.node, append(attOpts, superpeer.WithSuperpeers(1), superpeer.WithFraction(0.25))...)
		if err != nil {
			return nil, err
		}
		v.psel = ps
		if err := ps.Start(ctx); err != nil {
			return nil, err
		}
		v.attach = ps.Attach()
	default:
		return nil, fmt.Errorf("flood: no victim of method %q", method)
	}
	if v.clients, err = newClients(ctx, cfg, v.h, rng); err != nil {
		return nil, err
	}
	// The victim is a superpeer once its honest clients are served.
	deadline := time.Now().Add(30 * time.Second)
	for !v.serves(v.clients.ids()) {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("flood: the %s victim serves %d of its %d clients after 30 s", method, len(v.attach.Clients()), cfg.Clients)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	ok = true
	return v, nil
}

// serves is whether the victim's attach table lists every id.
func (v *victim) serves(ids []peer.ID) bool {
	served := map[peer.ID]bool{}
	for _, p := range v.attach.Clients() {
		served[p] = true
	}
	for _, p := range ids {
		if !served[p] {
			return false
		}
	}
	return true
}

// drops are the victim's refused frames, component/reason.
func (v *victim) drops() map[string]uint64 {
	out := map[string]uint64{}
	add := func(comp string, m map[string]uint64) {
		for k, n := range m {
			out[comp+"/"+k] += n
		}
	}
	add("dht", v.node.Stats().Drops())
	add("attach", v.attach.Drops())
	if v.viv != nil {
		add("vivaldi", v.viv.Drops())
	}
	if v.rsel != nil {
		add("repel", v.rsel.Drops())
		// repel counts a stream that failed before its frame among its
		// traffic, not its drops (a peer that went away); here it is a
		// frame refused like the others' "lost".
		st := v.rsel.Stats()
		for _, k := range []string{"announce_streams_lost", "move_streams_lost", "survey_streams_lost"} {
			out["repel/lost"] += st[k]
		}
	}
	return out
}

func (v *victim) close() {
	if v.clients != nil {
		v.clients.stop()
	}
	if v.cancel != nil {
		v.cancel()
	}
	if v.rsel != nil {
		v.rsel.Close()
	}
	if v.psel != nil {
		v.psel.Close()
	}
	if v.viv != nil {
		v.viv.Close()
	}
	if v.node != nil {
		v.node.Close()
	}
	if v.h != nil {
		v.h.Close()
	}
}

// clients are the honest clients: each a TCP host with the attach
// protocol, renewing with the victim every TTL/3.
type clients struct {
	hosts []host.Host
	atts  []*superpeer.Attach
	wg    sync.WaitGroup
	done  context.CancelFunc

	mu  sync.Mutex
	cur *renewals // the window being counted (nil: none)
}

// renewals count the renewals of one window.
type renewals struct {
	ok, failed uint64
	max        time.Duration
}

func newClients(ctx context.Context, cfg Config, to host.Host, rng *rand.Rand) (*clients, error) {
	c := &clients{}
	ctx, c.done = context.WithCancel(ctx)
	every := cfg.TTL / 3
	for range cfg.Clients {
		key, err := newKey(rng)
		if err != nil {
			c.stop()
			return nil, err
		}
		h, err := newHost(key, nil)
		if err != nil {
			c.stop()
			return nil, err
		}
		c.hosts = append(c.hosts, h)
		a, err := superpeer.NewAttach(h, superpeer.WithTTL(cfg.TTL))
		if err != nil {
			c.stop()
			return nil, err
		}
		c.atts = append(c.atts, a)
		if err := h.Connect(ctx, peer.AddrInfo{ID: to.ID(), Addrs: to.Addrs()}); err != nil {
			c.stop()
			return nil, err
		}
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			tick := time.NewTicker(every)
			defer tick.Stop()
			for {
				t0 := time.Now()
				rctx, cancel := context.WithTimeout(ctx, cfg.TTL)
				ans, err := a.RequestWith(rctx, to.ID(), superpeer.ClientRequest{})
				cancel()
				if ctx.Err() != nil {
					return
				}
				c.count(err == nil && ans.Status == superpeer.Accepted, time.Since(t0))
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
			}
		}()
	}
	return c, nil
}

func (c *clients) count(ok bool, took time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur == nil {
		return
	}
	if ok {
		c.cur.ok++
	} else {
		c.cur.failed++
	}
	c.cur.max = max(c.cur.max, took)
}

// window starts counting renewals; close ends the window and returns it.
func (c *clients) window() *renewals {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cur = &renewals{}
	return c.cur
}

func (c *clients) close(w *renewals) renewals {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur == w {
		c.cur = nil
	}
	return *w
}

func (c *clients) ids() []peer.ID {
	var out []peer.ID
	for _, h := range c.hosts {
		out = append(out, h.ID())
	}
	return out
}

func (c *clients) stop() {
	if c.done != nil {
		c.done()
	}
	c.wg.Wait()
	for _, a := range c.atts {
		a.Close()
	}
	for _, h := range c.hosts {
		h.Close()
	}
}

// sampler samples the process's memory and goroutines every 50 ms.
type sampler struct {
	rss0, heap0       uint64
	peakRSS, peakHeap uint64
	peakG             int
	quit              chan struct{}
	done              chan struct{}
}

func startSampler() *sampler {
	s := &sampler{quit: make(chan struct{}), done: make(chan struct{})}
	s.rss0, s.heap0 = swarm.RSS(), heapInuse()
	s.sample()
	go func() {
		defer close(s.done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-s.quit:
				return
			case <-tick.C:
				s.sample()
			}
		}
	}()
	return s
}

func (s *sampler) sample() {
	s.peakRSS = max(s.peakRSS, swarm.RSS())
	s.peakHeap = max(s.peakHeap, heapInuse())
	s.peakG = max(s.peakG, runtime.NumGoroutine())
}

func (s *sampler) stop() (rss, heap uint64, goroutines int) {
	close(s.quit)
	<-s.done
	s.sample()
	return s.peakRSS, s.peakHeap, s.peakG
}

func heapInuse() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// Sorted are m's keys, sorted.
func Sorted(m map[string]uint64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// uvarint is n as a protobuf length prefix.
func uvarint(n uint64) []byte { return binary.AppendUvarint(nil, n) }
