package swarm

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"net"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/connmgr"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"
	bconnmgr "github.com/libp2p/go-libp2p/p2p/net/connmgr"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/superpeer-overlay/superpeer/dht"
	"github.com/superpeer-overlay/superpeer/experiments/latency"
	"github.com/superpeer-overlay/superpeer/internal/memlimit"
)

// Config describes a swarm.
type Config struct {
	// N is the number of peers.
	N int
	// Seed drives everything random: peer identities, placement,
	// bootstrap choices, lookup keys. The same seed gives the same peers.
	Seed int64
	// RTT is the peers' latency space: RTT(i, j) in ms for i, j < N, every
	// pair known (use latency.Place over a filled matrix).
	RTT latency.RTTs
	// HostOf maps a peer to its host in the underlying matrix, for the
	// report; nil means peer i is host i.
	HostOf func(i int) int
	// BootstrapPeers is how many earlier peers each peer first connects to
	// (default 3).
	BootstrapPeers int
	// Parallel bounds how many peers bootstrap or refresh at once (default
	// 256). Joining is bound by link latency, not CPU, so many at once pay.
	Parallel int
	// NodeOptions are given to every dht.Node, after the swarm's own
	// default: no periodic routing-table refresh. A refresh looks up a random
	// key in every bucket; thousands of peers refreshing at once spend the
	// machine on it, and the swarm converges by self-lookups instead
	// (WaitConverged). Pass dht.WithRoutingTableRefresh to turn it back on.
	NodeOptions []dht.Option
	// Hold leaves the last Hold peers out of Join: built but not in the
	// overlay, to join later with JoinLate.
	Hold int
	// Progress, if set, is told how far each stage has come.
	Progress func(stage string, done, total int)
	// Log, if set, is told what a long wait is waiting for.
	Log func(line string)
	// ConnLow and ConnHigh are each host's connection manager watermarks
	// (go-libp2p's BasicConnMgr): above ConnHigh it closes the least
	// valuable connections older than ConnGrace down to ConnLow. Every
	// connection costs a few streams and goroutines (GossipSub keeps a
	// stream to each connected peer), and Vivaldi's random samples reach
	// most of the routing table, so without trimming a 200-peer swarm held
	// 100 connections a peer. Defaults 32 / 64 / 30 s; ConnHigh < 0 turns
	// trimming off. ConnSilence is how often it checks (default 10 s).
	ConnLow, ConnHigh      int
	ConnGrace, ConnSilence time.Duration
	// Transport is what the hosts speak: Mocknet (the default), or TCP or
	// QUIC on real sockets at ListenIP (default 127.0.0.1), where the
	// latencies are the kernel's and RTT only places the peers (for the
	// report's client RTTs and the k-median).
	Transport Transport
	ListenIP  string
	// From and To are the peers this process runs: [From, To) of the N
	// (default all). On real sockets several processes given the same N and
	// Seed run one overlay, each its own range, the later ones joining
	// through Bootstrap. The peers outside the range are remote: known by ID
	// and key (identities follow from the seed), counted in what all keys
	// say (Nearest, ExpectedSuperpeers, CheckLookups), never run here.
	From, To int
	// Bootstrap is peers outside this process that the range joins
	// through: its first joinWave peers through them, the rest through
	// those (real sockets only).
	Bootstrap []peer.AddrInfo
	// OwnPeerstores gives each mocknet host go-libp2p's in-memory peerstore
	// as it is, with its own copy of every protocol list, metadata string
	// and address; by default the hosts keep those interned, once for the
	// swarm (peerstore.go), and see the same.
	OwnPeerstores bool
	// Serve gives, for a node's protocol prefix, stream protocols every
	// local host lists before it connects (those its node does not serve
	// already), each answered with a reset until a method or the
	// coordinate services register its own handler (ProtocolsOf makes
	// one from the packages' AddLimits). go-libp2p's identify pushes a
	// host's protocol list to every connected peer, a new stream each,
	// whenever the list changes; a protocol listed from the start is
	// replaced without a change, so that starting the coordinates or a
	// method on thousands of connected hosts pushes nothing. nil: none.
	Serve func(prefix protocol.ID) []protocol.ID
}

// The connection manager's periods when Config leaves them zero.
const (
	DefaultConnGrace   = 30 * time.Second
	DefaultConnSilence = 10 * time.Second
)

// RepelConnGrace is the grace `peer swarm` and the live growth experiment
// give the connection managers when the repel method runs: its clients dial
// every candidate holder they measure, and a grace of DefaultConnGrace kept
// those connections on the holders by the hundred (experiments/README.md,
// "Trimmed connections, and lookups of live tokens' names").
const RepelConnGrace = 10 * time.Second

// DilatedConnPeriods are the connection manager's grace and silence
// periods for a swarm to be dilated by f (Dilate), grace given in the
// network's time (0: DefaultConnGrace). The manager's clock is not
// dilated: with its periods stretched by hand, a dilated swarm trims (and
// redials, and kad-dht re-checks) no more often per second of network
// time.
func DilatedConnPeriods(grace time.Duration, f float64) (wallGrace, wallSilence time.Duration) {
	if grace <= 0 {
		grace = DefaultConnGrace
	}
	return time.Duration(float64(grace) * f), time.Duration(float64(DefaultConnSilence) * f)
}

// Peer is one member of the swarm.
type Peer struct {
	Index int
	ID    peer.ID
	// Remote marks a peer that another process runs (Config.From, To): it
	// has no Host or Node here.
	Remote bool
	Host   host.Host
	Node   *dht.Node
	Key    dht.Key
}

// Swarm is n real libp2p hosts in one process over mocknet, each running a
// dht.Node, with every link's latency taken from the RTT space — or, on
// real sockets (Config.Transport), the hosts of a range of them, one
// overlay with the other ranges' processes.
type Swarm struct {
	cfg   Config
	mn    mocknet.Mocknet
	link  *linker
	Peers []*Peer
	index map[peer.ID]int
	rng   *rand.Rand
	in    *interner

	BuildTime    time.Duration
	ConvergeTime time.Duration
	// ConvergeMisses counts WaitConverged's check lookups that missed
	// (each mended and tried again).
	ConvergeMisses int
	// active is the method running (StartMethod), nil before and after.
	active *Run
	// viv is the Vivaldi run (StartVivaldi) until it closes: a peer that
	// joins late gets its service.
	viv  *VivaldiRun
	dead []atomic.Bool // written by Kill, read by the live map's snapshots too
	// held is written by JoinLate, read by Live from any goroutine: a held
	// peer's selector and Vivaldi service are written before it is cleared,
	// so whoever finds the peer live finds them.
	held  []atomic.Bool
	rngMu sync.Mutex // guards rng once JoinLate may run from several goroutines
	// clock is the network's time: one segment per Dilate, the last one
	// the factor now (nil: never dilated, factor 1).
	clock atomic.Pointer[[]dilationSeg]
	// cutOnce guards Cut.
	cutOnce sync.Once

	// JoinLookupFailures counts joins whose self-lookup failed after the
	// peer had connected (left to WaitConverged to mend).
	JoinLookupFailures atomic.Int64
	// JoinRetries counts joins tried again through other peers.
	JoinRetries atomic.Int64
}

// identity derives peer i's key pair from the seed, so that a swarm rerun
// with the same seed has the same peer IDs and therefore the same keys.
func identity(seed int64, i int) (crypto.PrivKey, error) {
	r := rand.New(rand.NewSource(seed*1_000_003 + int64(i)))
	sk, _, err := crypto.GenerateEd25519Key(r)
	return sk, err
}

// addr gives peer i an address in 100::/64, the IPv6 discard prefix: mocknet
// never sends anything, and nothing could leave the machine if it did.
func addr(i int) ma.Multiaddr {
	ip := net.ParseIP("100::")
	ip[12], ip[13], ip[14], ip[15] = byte(i>>24), byte(i>>16), byte(i>>8), byte(i)
	return ma.StringCast("/ip6/" + ip.String() + "/tcp/4001")
}

// Dilate stretches the swarm's time by f from now on: every link's latency
// is f times the matrix's, and the Vivaldi services and selectors started
// after it run every timer f times longer and divide what they measure by
// f (vivaldi.WithTimeScale, repel.Config.Dilated). The machine's own delays
// — a goroutine scheduled late, a collector pause — are not stretched, so
// in the network's time they shrink by f: what the peers measure is the
// matrix, not the load, at the price of f times the wall-clock time. The
// swarm's reports are in the network's time (Elapsed). Prefix selection
// and the DHT's lookups do not follow it.
//
// Dilate may be called again while the swarm runs (e.g. coordinates warmed
// up at one factor, the selection run at another): the running Vivaldi
// services follow the new factor (vivaldi.Service.SetTimeScale; a sample in
// flight across the change is discarded), and the network's time runs on
// from where it was. Selectors already started keep the factor they were
// started under: change it before starting a method.
func (s *Swarm) Dilate(f float64) error {
	if !(f >= 1) || f > 1000 {
		return fmt.Errorf("swarm: dilation %v not in [1, 1000]", f)
	}
	if s.cfg.Transport.Real() && f != 1 {
		return fmt.Errorf("swarm: dilation needs mocknet (the kernel's links do not stretch), not %s", s.cfg.Transport)
	}
	now := time.Now()
	segs := []dilationSeg{{wall: now, f: 1}} // before: undilated
	if old := s.clock.Load(); old != nil {
		segs = slices.Clone(*old)
	}
	segs = append(segs, dilationSeg{wall: now, net: netTime(segs, now), f: f})
	s.clock.Store(&segs)
	s.link.dilate(f)
	if v := s.viv; v != nil {
		if err := v.rescale(); err != nil {
			return err
		}
	}
	return nil
}

// dilationSeg is a stretch of the swarm's time under one factor: from wall
// on, the network's time is net plus the wall time since over f.
type dilationSeg struct {
	wall time.Time
	net  time.Duration
	f    float64
}

// netTime is the network's time at wall instant t, counted from the first
// segment's start.
func netTime(segs []dilationSeg, t time.Time) time.Duration {
	k := 0
	for k+1 < len(segs) && !t.Before(segs[k+1].wall) {
		k++
	}
	return segs[k].net + time.Duration(float64(t.Sub(segs[k].wall))/segs[k].f)
}

// Dilation is the factor of Dilate now (1 if never dilated).
func (s *Swarm) Dilation() float64 {
	if segs := s.clock.Load(); segs != nil {
		return (*segs)[len(*segs)-1].f
	}
	return 1
}

// Elapsed is the network's time since t: the wall-clock time since, each
// stretch of it divided by the dilation it ran under.
func (s *Swarm) Elapsed(t time.Time) time.Duration {
	segs := s.clock.Load()
	if segs == nil {
		return time.Since(t)
	}
	return netTime(*segs, time.Now()) - netTime(*segs, t)
}

// Network is d of the clock in the network's time at today's dilation: d
// divided by it.
func (s *Swarm) Network(d time.Duration) time.Duration {
	return time.Duration(float64(d) / s.Dilation())
}

// Wall is how long d of the network's time takes on the clock at today's
// dilation: d times it.
func (s *Swarm) Wall(d time.Duration) time.Duration {
	return time.Duration(float64(d) * s.Dilation())
}

// New builds the hosts and their DHT nodes. Nobody is connected yet: call
// Join, then WaitConverged.
func New(ctx context.Context, cfg Config) (*Swarm, error) {
	if cfg.N < 2 {
		return nil, fmt.Errorf("swarm: need at least 2 peers, have %d", cfg.N)
	}
	if cfg.RTT == nil || cfg.RTT.Len() < cfg.N {
		return nil, errors.New("swarm: the RTT space must cover every peer")
	}
	if cfg.BootstrapPeers <= 0 {
		cfg.BootstrapPeers = 3
	}
	if cfg.Parallel <= 0 {
		cfg.Parallel = 256
	}
	if cfg.HostOf == nil {
		cfg.HostOf = func(i int) int { return i }
	}
	if cfg.ConnHigh == 0 {
		cfg.ConnLow, cfg.ConnHigh = 32, 64
	}
	if cfg.ConnGrace <= 0 {
		cfg.ConnGrace = DefaultConnGrace
	}
	if cfg.ConnSilence <= 0 {
		cfg.ConnSilence = DefaultConnSilence
	}
	if cfg.ConnHigh > 0 && (cfg.ConnLow < 0 || cfg.ConnLow > cfg.ConnHigh) {
		return nil, fmt.Errorf("swarm: connection watermarks %d:%d: want 0 <= low <= high", cfg.ConnLow, cfg.ConnHigh)
	}
	tr, err := ParseTransport(string(cfg.Transport))
	if err != nil {
		return nil, err
	}
	cfg.Transport = tr
	if cfg.ListenIP == "" {
		cfg.ListenIP = "127.0.0.1"
	}
	if cfg.To == 0 {
		cfg.To = cfg.N
	}
	switch {
	case cfg.From < 0 || cfg.To > cfg.N || cfg.From >= cfg.To:
		return nil, fmt.Errorf("swarm: peers [%d, %d) not a range of the %d", cfg.From, cfg.To, cfg.N)
	case !tr.Real() && (cfg.From > 0 || cfg.To < cfg.N || len(cfg.Bootstrap) > 0):
		return nil, errors.New("swarm: a range of the peers, or peers to join through, need real sockets (TCP or QUIC): mocknet is one process")
	case cfg.Hold > 0 && (cfg.From > 0 || cfg.To < cfg.N):
		return nil, errors.New("swarm: held peers need the whole swarm in one process")
	}
	start := time.Now()
	s := &Swarm{
		cfg:   cfg,
		mn:    mocknet.New(),
		index: make(map[peer.ID]int, cfg.N),
		rng:   rand.New(rand.NewSource(cfg.Seed)),
		in:    newInterner(),
		dead:  make([]atomic.Bool, cfg.N),
		held:  make([]atomic.Bool, cfg.N),
	}
	for i := max(0, cfg.N-cfg.Hold); i < cfg.N; i++ {
		s.held[i].Store(true)
	}
	s.link = newLinker(s.mn, s.index, cfg.N, cfg.RTT.RTT)
	for i := 0; i < cfg.N; i++ {
		sk, err := identity(cfg.Seed, i)
		if err != nil {
			s.Close()
			return nil, err
		}
		id, err := peer.IDFromPrivateKey(sk)
		if err != nil {
			s.Close()
			return nil, err
		}
		if _, dup := s.index[id]; dup {
			s.Close()
			return nil, fmt.Errorf("swarm: peer %d has the ID of another peer", i)
		}
		s.index[id] = i
		if i < cfg.From || i >= cfg.To {
			s.Peers = append(s.Peers, &Peer{Index: i, ID: id, Remote: true, Key: dht.KeyOf(id)})
			continue
		}
		h, err := s.host(i, sk)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("swarm: peer %d: %w", i, err)
		}
		node, err := dht.New(ctx, h, append([]dht.Option{dht.WithRoutingTableRefresh(0)}, cfg.NodeOptions...)...)
		if err != nil {
			_ = h.Close()
			s.Close()
			return nil, fmt.Errorf("swarm: peer %d: %w", i, err)
		}
		if cfg.Serve != nil {
			serveAhead(h, cfg.Serve(node.ProtocolPrefix()))
		}
		s.Peers = append(s.Peers, &Peer{Index: i, ID: id, Host: h, Node: node, Key: node.Key()})
		s.progress("build", i+1-cfg.From, cfg.To-cfg.From)
	}
	s.BuildTime = time.Since(start)
	return s, nil
}

// serveAhead lists protos on h, those it does not serve yet, each
// resetting its streams until its own handler replaces it (Config.Serve).
func serveAhead(h host.Host, protos []protocol.ID) {
	have := map[protocol.ID]bool{}
	for _, p := range h.Mux().Protocols() {
		have[p] = true
	}
	for _, p := range protos {
		if !have[p] {
			h.SetStreamHandler(p, func(st network.Stream) { _ = st.Reset() })
		}
	}
}

// ProtocolsOf is a Config.Serve: the protocols that adds — packages'
// AddLimits, such as repel.AddLimits for every protocol a peer of the token
// method speaks — set resource-manager limits for under a prefix, sorted.
func ProtocolsOf(adds ...func(*rcmgr.ScalingLimitConfig, protocol.ID)) func(protocol.ID) []protocol.ID {
	return func(prefix protocol.ID) []protocol.ID {
		var cfg rcmgr.ScalingLimitConfig
		for _, add := range adds {
			add(&cfg, prefix)
		}
		out := make([]protocol.ID, 0, len(cfg.ProtocolLimits))
		for p := range cfg.ProtocolLimits {
			out = append(out, p)
		}
		slices.Sort(out)
		return out
	}
}

func (s *Swarm) logf(format string, args ...any) {
	if s.cfg.Log != nil {
		s.cfg.Log(fmt.Sprintf(format, args...))
	}
}

func (s *Swarm) progress(stage string, done, total int) {
	if s.cfg.Progress != nil {
		s.cfg.Progress(stage, done, total)
	}
}

// host makes peer i's host with its connection manager: on mocknet one that
// links before it dials, on real sockets a go-libp2p host.
func (s *Swarm) host(i int, sk crypto.PrivKey) (host.Host, error) {
	cfg := s.cfg
	var cm connmgr.ConnManager = &connmgr.NullConnMgr{}
	if cfg.ConnHigh > 0 {
		bcm, err := bconnmgr.NewConnManager(cfg.ConnLow, cfg.ConnHigh, bconnmgr.WithGracePeriod(cfg.ConnGrace), bconnmgr.WithSilencePeriod(cfg.ConnSilence))
		if err != nil {
			return nil, err
		}
		cm = bcm
	}
	if cfg.Transport.Real() {
		return realHost(cfg.Transport, cfg.ListenIP, sk, cm)
	}
	var h host.Host
	var err error
	if cfg.OwnPeerstores {
		h, err = s.mn.AddPeer(sk, addr(i))
	} else {
		h, err = s.internedHost(sk, addr(i))
	}
	if err != nil {
		_ = cm.Close()
		return nil, err
	}
	if bcm, ok := cm.(*bconnmgr.BasicConnMgr); ok {
		h.Network().Notify(bcm.Notifee())
	}
	return &lazyHost{Host: h, l: s.link, cm: cm}, nil
}

// ranged reports whether other processes run some of the peers.
func (s *Swarm) ranged() bool { return s.cfg.From > 0 || s.cfg.To < len(s.Peers) }

// ConnectedAcross reports whether a peer here is connected to a remote one.
func (s *Swarm) ConnectedAcross() bool { return s.connectedTo(0) }

// ConnectedBeyond reports whether a peer here is connected to a remote
// peer above this process's range (one of a process started after it, when
// the ranges start in order).
func (s *Swarm) ConnectedBeyond() bool { return s.connectedTo(s.cfg.To) }

func (s *Swarm) connectedTo(from int) bool {
	for _, i := range s.Live() {
		for _, q := range s.Peers[i].Host.Network().Peers() {
			if j := s.Index(q); j >= from && s.Peers[j].Remote {
				return true
			}
		}
	}
	return false
}

// Local lists the peers this process runs (Config.From, To), dead or held
// ones too.
func (s *Swarm) Local() []*Peer { return s.Peers[s.cfg.From:s.cfg.To] }

// Transport is what the swarm's hosts speak.
func (s *Swarm) Transport() Transport { return s.cfg.Transport }

// Addrs is peer i's addresses with its ID (/…/p2p/ID), to join through
// from another process; nil for a remote peer.
func (s *Swarm) Addrs(i int) []ma.Multiaddr {
	p := s.Peers[i]
	if p.Remote {
		return nil
	}
	out, err := peer.AddrInfoToP2pAddrs(&peer.AddrInfo{ID: p.ID, Addrs: p.Host.Addrs()})
	if err != nil {
		return nil
	}
	return out
}

// Index is the swarm index of a peer, or -1.
func (s *Swarm) Index(p peer.ID) int {
	if i, ok := s.index[p]; ok {
		return i
	}
	return -1
}

// RTT is the matrix RTT between two swarm peers in ms.
func (s *Swarm) RTT(i, j int) float64 { return s.cfg.RTT.RTT(i, j) }

// HostOf is the matrix host of peer i.
func (s *Swarm) HostOf(i int) int { return s.cfg.HostOf(i) }

// Links is how many mocknet links the swarm has made.
func (s *Swarm) Links() int {
	return int(s.link.links.Load())
}

// StuckIdentifies is the number of connections closed because identify had
// not finished on them for a minute (see lazyHost.unstick).
func (s *Swarm) StuckIdentifies() int {
	return int(s.link.stuck.Load())
}

// Dials counts the dials of a peer not connected on the swarm's mocknet
// hosts, by the protocol that asked for the stream (its ID), or "connect"
// for a Host.Connect (kad-dht's queries connect before they open a stream,
// so their dials count there).
func (s *Swarm) Dials() map[string]uint64 {
	out := map[string]uint64{}
	if s.link == nil {
		return out
	}
	s.link.dials.Range(func(k, v any) bool {
		out[k.(string)] = v.(*atomic.Uint64).Load()
		return true
	})
	return out
}

func (s *Swarm) info(i int) peer.AddrInfo {
	h := s.Peers[i].Host
	return peer.AddrInfo{ID: h.ID(), Addrs: h.Addrs()}
}

// Join joins every peer: peer i connects to a few random peers that joined
// before it and looks up its own key (dht.Node.Join), as a peer joining a
// live network does. Up to Parallel peers join at once. A peer whose join
// fails without a connection left (its bootstrap peer busy joining itself,
// or the connection closed under load) tries again through other random
// earlier peers, up to joinTries times in all.
func (s *Swarm) Join(ctx context.Context) error {
	start := time.Now()
	defer func() { s.BuildTime += time.Since(start) }()
	// boot[i][t] are peer i's bootstrap peers on try t: the first from the
	// swarm's RNG as ever, the spares from their own. The first peer of a
	// range joins through Config.Bootstrap (if any), every later one
	// through peers of the range before it.
	local := s.Local()
	boot := make([][][]peer.AddrInfo, len(s.Peers))
	spare := rand.New(rand.NewSource(s.cfg.Seed + 2))
	for k := 1; k < len(local); k++ {
		i := local[k].Index
		boot[i] = make([][]peer.AddrInfo, joinTries)
		for t := range joinTries {
			rng := spare
			if t == 0 {
				rng = s.rng
			}
			for b := 0; b < s.cfg.BootstrapPeers && b < k; b++ {
				boot[i][t] = append(boot[i][t], s.info(local[rng.Intn(k)].Index))
			}
		}
	}
	var done atomic.Int64
	join := func(ctx context.Context, p *Peer) error {
		defer func() { s.progress("join", int(done.Add(1)), len(local)) }()
		if boot[p.Index] == nil || s.held[p.Index].Load() {
			return nil
		}
		var err error
		for try := 0; try < joinTries; try++ {
			if try > 0 {
				s.JoinRetries.Add(1)
			}
			err = p.Node.Join(ctx, boot[p.Index][try]...)
			if err == nil || ctx.Err() != nil {
				break
			}
			if len(p.Host.Network().Peers()) > 0 {
				// Connected, but no peer entered the routing table in
				// time or the self-lookup failed: WaitConverged looks
				// again for every peer that still lacks its neighbours.
				if s.JoinLookupFailures.Add(1) == 1 {
					s.logf("join: peer %d left to convergence (the first): %v", p.Index, err)
				}
				return nil
			}
		}
		if err != nil {
			return fmt.Errorf("swarm: peer %d join (%d tries): %w", p.Index, joinTries, err)
		}
		return nil
	}
	bs := s.cfg.Bootstrap
	if len(bs) == 0 {
		return s.forEach(ctx, join, local)
	}
	// A range joins a live overlay: a first wave through the peers outside
	// it (Config.Bootstrap), the rest through random peers of that wave,
	// which by then hold the overlay's peers in their routing tables.
	// Joined through its own peers alone the range would be an island that
	// one link ties to the rest, and kad-dht's self-lookups (which start
	// from the routing table) would cross it too rarely for every peer to
	// find its nearest; all through the bootstrap peers at once, a few
	// hundred joins overrun them.
	wave := min(len(local), joinWave)
	for k, p := range local {
		boot[p.Index] = make([][]peer.AddrInfo, joinTries)
		for t := range joinTries {
			if k < wave {
				boot[p.Index][t] = []peer.AddrInfo{bs[spare.Intn(len(bs))]}
				continue
			}
			for b := 0; b < s.cfg.BootstrapPeers; b++ {
				boot[p.Index][t] = append(boot[p.Index][t], s.info(local[spare.Intn(wave)].Index))
			}
		}
	}
	if err := s.forEach(ctx, join, local[:wave]); err != nil {
		return err
	}
	return s.forEach(ctx, join, local[wave:])
}

// joinWave is how many peers of a range join through the peers outside
// it before the rest join through them (Join).
const joinWave = 16

// joinTries bounds the attempts of one peer's join in Join (one per
// bootstrap set Join draws).
const joinTries = 3

// JoinLate joins a held peer through a random live peer (through others if
// that fails without a connection, as Join does), then starts on it what
// runs on the other peers: its Vivaldi service if StartVivaldi runs (its
// random sample drawn from the peers live now), and the running method's
// selector (built now when the method was given the Vivaldi run, which it
// needs the peer's service for). The peer is live (Live) once all of that
// has started, and not before. JoinLate may run for several peers at once,
// once for each; not beside Kill, StartMethod or StartVivaldi.
func (s *Swarm) JoinLate(ctx context.Context, i int) error {
	if i < 0 || i >= len(s.Peers) || !s.held[i].Load() {
		return fmt.Errorf("swarm: peer %d is not held back", i)
	}
	live := s.Live()
	if len(live) == 0 {
		return fmt.Errorf("swarm: peer %d: no live peer to join through", i)
	}
	p := s.Peers[i]
	var err error
	for try := 0; try < joinTries; try++ {
		if try > 0 {
			s.JoinRetries.Add(1)
		}
		s.rngMu.Lock()
		boot := s.info(live[s.rng.Intn(len(live))])
		s.rngMu.Unlock()
		tctx, cancel := context.WithTimeout(ctx, joinTryTimeout)
		err = p.Node.Join(tctx, boot)
		cancel()
		if err == nil || ctx.Err() != nil {
			break
		}
		if len(p.Host.Network().Peers()) > 0 {
			// Connected: its later lookups fill the routing table.
			s.JoinLookupFailures.Add(1)
			err = nil
			break
		}
	}
	if err != nil {
		return fmt.Errorf("swarm: peer %d join (%d tries): %w", i, joinTries, err)
	}
	if v := s.viv; v != nil {
		if err := v.join(i); err != nil {
			return err
		}
	}
	if r := s.active; r != nil {
		if err := r.join(ctx, i); err != nil {
			return err
		}
	}
	s.held[i].Store(false)
	return nil
}

// joinTryTimeout bounds one try of JoinLate: on a loaded machine a join's
// connect or self-lookup could otherwise hold up whoever waits for it for
// minutes (a grown swarm's batch of joins did).
const joinTryTimeout = 30 * time.Second

// Held is how many peers are held back, not yet joined.
func (s *Swarm) Held() int {
	n := 0
	for i := range s.held {
		if s.held[i].Load() && !s.dead[i].Load() {
			n++
		}
	}
	return n
}

// forEach runs f for the given peers, Parallel at a time, and returns the
// first error.
func (s *Swarm) forEach(ctx context.Context, f func(context.Context, *Peer) error, peers []*Peer) error {
	sem := make(chan struct{}, s.cfg.Parallel)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for _, p := range peers {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return ctx.Err()
		}
		wg.Add(1)
		go func(p *Peer) {
			defer wg.Done()
			defer func() { <-sem }()
			if err := f(ctx, p); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}(p)
	}
	wg.Wait()
	return first
}

// Nearest is, for every peer, the index of the peer whose key is
// XOR-closest to its own (computed from all keys).
func (s *Swarm) Nearest() []int {
	live := s.Everyone()
	keys := make([]dht.Key, len(live))
	for k, i := range live {
		keys[k] = s.Peers[i].Key
	}
	out := make([]int, len(s.Peers))
	for i := range out {
		out[i] = -1
	}
	for k, j := range NearestKeys(keys) {
		if j >= 0 {
			out[live[k]] = live[j]
		}
	}
	return out
}

// ClosestTo is the index of the peer whose key is XOR-closest to target,
// over all peers except those in skip.
func (s *Swarm) ClosestTo(target dht.Key, skip func(i int) bool) int {
	best := -1
	for _, i := range s.Everyone() {
		p := s.Peers[i]
		if skip != nil && skip(i) {
			continue
		}
		if best < 0 || target.Closer(p.Key, s.Peers[best].Key) {
			best = i
		}
	}
	return best
}

// missingNearest lists the peers whose routing table lacks their
// XOR-nearest peer.
func (s *Swarm) missingNearest() []*Peer {
	nearest := s.Nearest()
	var out []*Peer
	for _, i := range s.Live() {
		p := s.Peers[i]
		if nearest[i] >= 0 && p.Node.RoutingTable().Find(s.Peers[nearest[i]].ID) == "" {
			out = append(out, p)
		}
	}
	return out
}

// whyMissing describes the first few peers that lack their nearest: what
// each side knows of the other, and whether a direct request between them
// works.
func (s *Swarm) whyMissing(ctx context.Context, missing []*Peer) string {
	nearest := s.Nearest()
	var out []string
	for _, p := range missing[:min(3, len(missing))] {
		q := s.Peers[nearest[p.Index]]
		protos, _ := p.Host.Peerstore().GetProtocols(q.ID)
		held := 0
		for _, i := range s.Live() {
			if s.Peers[i].Node.RoutingTable().Find(q.ID) != "" {
				held++
			}
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		got, err := p.Node.Closest(cctx, q.Key, 1)
		cancel()
		direct := fmt.Sprint(err)
		if err == nil {
			direct = fmt.Sprintf("lookup of its key found %d (want %d)", s.Index(got[0]), q.Index)
		}
		holdsUs := "remote"
		if !q.Remote {
			holdsUs = fmt.Sprint(q.Node.RoutingTable().Find(p.ID) != "")
		}
		out = append(out, fmt.Sprintf("peer %d lacks %d: connected %v, %d protocols known, it holds us %s, %d tables hold it, routing table %d peers, cpl %d; %s",
			p.Index, q.Index, p.Host.Network().Connectedness(q.ID), len(protos),
			holdsUs, held, p.Node.RoutingTable().Size(),
			p.Key.CommonPrefixLen(q.Key), direct))
	}
	return strings.Join(out, "; ")
}

// LookupCheck is the outcome of a batch of lookups of random keys.
type LookupCheck struct {
	Tried int `json:"tried"`
	Exact int `json:"exact"`
}

// lookupJob is one check lookup: name's key, looked up from peer from.
type lookupJob struct {
	from int
	name string
}

// lookupMiss is a check lookup whose first answer was not the true
// XOR-closest peer: want is that peer, got the one found (-1 for none).
type lookupMiss struct {
	job       lookupJob
	want, got int
}

// CheckLookups runs tries lookups of random keys from random peers and counts
// those whose first answer is the true XOR-closest peer over all keys. With
// raw true they use dht.Node.Closest on random points of the key space (the
// node itself a candidate); otherwise kad-dht's own GetClosestPeers on random
// names (the asking node excluded, as kad-dht never returns itself).
func (s *Swarm) CheckLookups(ctx context.Context, tries int, raw bool, rng *rand.Rand) LookupCheck {
	c, _ := s.checkLookups(ctx, s.lookupJobs(tries, rng), raw)
	return c
}

// lookupJobs draws tries check lookups: a random live peer and a random name.
func (s *Swarm) lookupJobs(tries int, rng *rand.Rand) []lookupJob {
	jobs := make([]lookupJob, tries)
	live := s.Live()
	for t := range jobs {
		jobs[t] = lookupJob{from: live[rng.Intn(len(live))], name: "lookup-check/" + strconv.FormatInt(rng.Int63(), 36)}
	}
	return jobs
}

// checkLookups runs the jobs, 16 at once, and returns the count and the
// misses. A job whose asker has died since it was drawn is not tried.
func (s *Swarm) checkLookups(ctx context.Context, jobs []lookupJob, raw bool) (LookupCheck, []lookupMiss) {
	var (
		exact  atomic.Int64
		tried  atomic.Int64
		mu     sync.Mutex
		misses []lookupMiss
	)
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for _, j := range jobs {
		if !s.live(j.from) {
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		go func(j lookupJob) {
			defer wg.Done()
			defer func() { <-sem }()
			tried.Add(1)
			target := dht.KeyOfName(j.name)
			from := s.Peers[j.from]
			var got []peer.ID
			var err error
			want := -1
			if raw {
				got, err = from.Node.Closest(ctx, target, 1)
				want = s.ClosestTo(target, nil)
			} else {
				got, err = from.Node.LookupName(ctx, j.name)
				want = s.ClosestTo(target, func(i int) bool { return i == j.from })
			}
			if err == nil && len(got) > 0 && got[0] == s.Peers[want].ID {
				exact.Add(1)
				return
			}
			m := lookupMiss{job: j, want: want, got: -1}
			if err == nil && len(got) > 0 {
				m.got = s.Index(got[0])
			}
			mu.Lock()
			misses = append(misses, m)
			mu.Unlock()
		}(j)
	}
	wg.Wait()
	return LookupCheck{Tried: int(tried.Load()), Exact: int(exact.Load())}, misses
}

// WaitConverged repeats self-lookups until the overlay is converged: every peer's
// routing table holds its XOR-nearest peer and a batch of random raw-key
// lookups are all exact. It gives up after maxRounds rounds.
func (s *Swarm) WaitConverged(ctx context.Context, maxRounds int) error {
	start := time.Now()
	defer func() { s.ConvergeTime += time.Since(start) }()
	rng := rand.New(rand.NewSource(s.cfg.Seed + 1))
	// retry holds the check lookups that missed, mends the targeted
	// mends since the last full round.
	var retry []lookupJob
	mends := 0
	for round := 0; ; round++ {
		if s.ranged() && !s.ConnectedAcross() {
			// The other ranges' processes have not joined yet: wait for
			// them without spending the rounds.
			round = 0
			select {
			case <-ctx.Done():
				return fmt.Errorf("swarm: no peer of another process connected: %w", ctx.Err())
			case <-time.After(time.Second):
			}
			continue
		}
		missing := s.missingNearest()
		s.progress("converge", len(s.Live())-len(missing), len(s.Live()))
		if len(missing) == 0 {
			// A batch of fresh lookups, and the misses of the last batch
			// again: every one must be exact.
			jobs := slices.Concat(retry, s.lookupJobs(20, rng))
			c, misses := s.checkLookups(ctx, jobs, true)
			if c.Exact == c.Tried {
				return nil
			}
			s.ConvergeMisses += len(misses)
			retry = retry[:0]
			for _, m := range misses {
				retry = append(retry, m.job)
			}
			if mends < mendTries {
				// Every peer knows its nearest, yet a lookup missed: the
				// peer it should have found and the one it found look
				// again, which puts each in the tables around the key.
				mends++
				missing = s.mendMisses(misses)
			} else {
				// Missed again after mending: all look again.
				mends = 0
				for _, i := range s.Live() {
					missing = append(missing, s.Peers[i])
				}
			}
		}
		if round >= 5 {
			// The stragglers: leave time for a stuck identify to be
			// noticed (lazyHost.unstick) rather than spending the rounds
			// in a burst. A peer whose connection to its nearest never
			// finished identify keeps it out of its routing table without
			// ever failing a request to it: look at those connections.
			nearest := s.Nearest()
			for _, p := range missing {
				if lh, ok := p.Host.(*lazyHost); ok && nearest[p.Index] >= 0 {
					lh.unstick(s.Peers[nearest[p.Index]].ID)
				}
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(2 * time.Second):
			}
		}
		if round >= maxRounds {
			return fmt.Errorf("swarm: not converged after %d refresh rounds: %d peers lack their nearest peer (%s)", round, len(missing), s.whyMissing(ctx, missing))
		}
		// The peers that look again: those lacking their nearest, and
		// their nearest too — a peer that no table took in (its join's
		// queries came while the tables near it checked others) is found
		// by no lookup until it asks the peers near it itself, which
		// takes it into their tables.
		look := slices.Clone(missing)
		if round > 0 {
			nearest := s.Nearest()
			in := make(map[int]bool, 2*len(missing))
			for _, p := range missing {
				in[p.Index] = true
			}
			for _, p := range missing {
				if q := nearest[p.Index]; q >= 0 && !in[q] && !s.dead[q].Load() && !s.Peers[q].Remote {
					in[q] = true
					look = append(look, s.Peers[q])
				}
			}
		}
		if err := s.forEach(ctx, func(ctx context.Context, p *Peer) error {
			// A failed lookup is not fatal: the next round tries again.
			_ = p.Node.SelfLookup(ctx)
			return nil
		}, look); err != nil {
			return err
		}
	}
}

// mendTries is how many times in a row WaitConverged mends the peers about
// missed check lookups before every peer looks again.
const mendTries = 2

// mendMisses is the local live peers about the missed lookups: each one's
// true closest peer and the peer its lookup ended at.
func (s *Swarm) mendMisses(misses []lookupMiss) []*Peer {
	var out []*Peer
	in := make(map[int]bool, 2*len(misses))
	for _, m := range misses {
		for _, i := range []int{m.want, m.got} {
			if i < 0 || in[i] || s.Peers[i].Remote || !s.live(i) {
				continue
			}
			in[i] = true
			out = append(out, s.Peers[i])
		}
	}
	return out
}

// KadMessages is the number of kad-dht requests all peers have sent.
func (s *Swarm) KadMessages() uint64 {
	var total uint64
	for _, p := range s.Local() {
		total += p.Node.Stats().KadSent.Load()
	}
	return total
}

// Cut ends the swarm's network ahead of closing it: from here no peer of
// this process dials another, and every connection they hold is closed, so
// that what closes after it (a method's selectors, the coordinate
// services, the DHT nodes) has no peer to tell. Without it each closing
// protocol removes its stream handlers from a connected host, and
// go-libp2p's identify pushes every such change to every connected peer:
// at 2 000 peers about 10^5 new streams over dilated links, minutes of a
// run that is already over. Close cuts first; a caller that closes a
// method or the coordinates before the swarm cuts before them. Cut is for
// the end: a swarm once cut stays cut.
func (s *Swarm) Cut() {
	s.cutOnce.Do(func() {
		if !s.cfg.Transport.Real() {
			s.link.cut()
		}
		s.eachHost(func(p *Peer) {
			if s.cfg.Transport.Real() {
				// The host's own swarm refuses dials once closed, and
				// closing it again with the host is a no-op.
				_ = p.Host.Network().Close()
				return
			}
			for _, c := range p.Host.Network().Conns() {
				_ = c.Close()
			}
		})
	})
}

// Close stops every node and the mock network.
func (s *Swarm) Close() {
	s.Cut()
	s.eachHost(func(p *Peer) {
		if sel := s.activeSelector(p.Index); sel != nil {
			sel.Close()
		}
		p.Node.Close()
		p.Host.Close()
	})
	s.mn.Close()
}

// eachHost runs f on every live peer with a host in this process, 64 at a
// time, and returns once all are done. It walks s.Peers, not Local: a swarm
// that failed while New built it holds fewer peers than its range, and is
// cut and closed too.
func (s *Swarm) eachHost(f func(p *Peer)) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for _, p := range s.Peers {
		if p.Remote || p.Host == nil || s.dead[p.Index].Load() {
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			f(p)
		}()
	}
	wg.Wait()
}

// RSS is the process's resident set size in bytes, from /proc (0 elsewhere).
func RSS() uint64 { return memlimit.RSS() }

// Goroutines is the number of live goroutines.
func Goroutines() int { return runtime.NumGoroutine() }

// Connections is the mean and the largest number of peers a live peer is
// connected to.
func (s *Swarm) Connections() (mean float64, most int) {
	c := s.ConnectionStats()
	return c.Mean, c.Max
}

// ConnectionStats is how many peers the live peers are connected to, and
// how many of those their connection managers protect. go-libp2p's
// BasicConnMgr trims, once a peer holds more than the high watermark, the
// unprotected connections past their grace period down to the low
// watermark: the protected ones (kad-dht's two widest buckets, a client's
// superpeer and a superpeer's clients) and the young ones come on top.
type ConnectionStats struct {
	Mean float64 `json:"mean"`
	Max  int     `json:"max"`
	// MaxPeer is the index of the peer with Max connections (the first
	// such): whether it is a superpeer, say, the report's superpeer_of
	// tells.
	MaxPeer int `json:"max_peer"`
	// MaxPeerYoung and MaxPeerInbound are how many of MaxPeer's
	// connections are young (unprotected, first seen within the grace
	// period) and how many the other side opened.
	MaxPeerYoung   int     `json:"max_peer_young"`
	MaxPeerInbound int     `json:"max_peer_inbound"`
	ProtectedMean  float64 `json:"protected_mean"`
	UnprotectedMax int     `json:"unprotected_max"`
	// YoungMean counts the unprotected peers first seen within the
	// connection manager's grace period, which it does not trim.
	YoungMean float64 `json:"young_mean"`
}

// inboundPeers counts the peers h is connected to whose (first)
// connection the other side opened.
func inboundPeers(h host.Host) int {
	n := 0
	for _, q := range h.Network().Peers() {
		if cs := h.Network().ConnsToPeer(q); len(cs) > 0 && cs[0].Stat().Direction == network.DirInbound {
			n++
		}
	}
	return n
}

// ConnectionStats reads every live peer's connections.
func (s *Swarm) ConnectionStats() ConnectionStats {
	live := s.Live()
	var c ConnectionStats
	if len(live) == 0 {
		return c
	}
	total, protected, young := 0, 0, 0
	since := time.Now().Add(-s.cfg.ConnGrace)
	for _, i := range live {
		h := s.Peers[i].Host
		ps := h.Network().Peers()
		free, fresh := 0, 0
		for _, q := range ps {
			if h.ConnManager().IsProtected(q, "") {
				protected++
				continue
			}
			free++
			if ti := h.ConnManager().GetTagInfo(q); ti != nil && ti.FirstSeen.After(since) {
				fresh++
			}
		}
		young += fresh
		total += len(ps)
		if len(ps) > c.Max {
			c.Max, c.MaxPeer, c.MaxPeerYoung = len(ps), i, fresh
		}
		c.UnprotectedMax = max(c.UnprotectedMax, free)
	}
	if c.Max > 0 {
		c.MaxPeerInbound = inboundPeers(s.Peers[c.MaxPeer].Host)
	}
	c.Mean = float64(total) / float64(len(live))
	c.ProtectedMean = float64(protected) / float64(len(live))
	c.YoungMean = float64(young) / float64(len(live))
	return c
}
