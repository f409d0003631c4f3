package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/libp2p/go-libp2p"
	kaddht "github.com/libp2p/go-libp2p-kad-dht"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/superpeer-overlay/superpeer/dht"
	"github.com/superpeer-overlay/superpeer/internal/connrtt"
	"github.com/superpeer-overlay/superpeer/internal/limits"
	"github.com/superpeer-overlay/superpeer/internal/peerhost"
	"github.com/superpeer-overlay/superpeer/repel"
	"github.com/superpeer-overlay/superpeer/superpeer"
	"github.com/superpeer-overlay/superpeer/vivaldi"
)

func init() {
	commands["run"] = command{
		summary: "run one peer on the real network (TCP and QUIC)",
		run:     runPeer,
	}
}

// listFlag collects a repeatable or comma-separated flag.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

// loadIdentity reads the peer's private key from path, or makes one and
// writes it there (mode 0600) so that the peer keeps its ID across runs.
func loadIdentity(path string, puzzle int) (crypto.PrivKey, bool, error) {
	k, err := readIdentity(path)
	if !errors.Is(err, fs.ErrNotExist) {
		return k, false, err
	}
	k, _, err = superpeer.PuzzleKey(rand.Reader, puzzle)
	if err != nil {
		return nil, false, err
	}
	b, err := crypto.MarshalPrivateKey(k)
	if err != nil {
		return nil, false, err
	}
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, false, fmt.Errorf("identity key %s: %w", path, err)
		}
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return nil, false, fmt.Errorf("identity key %s: %w", path, err)
	}
	return k, true, nil
}

func runPeer(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("run", stderr)
	var listen, boot listFlag
	fs.Var(&listen, "listen", "multiaddr to listen on (repeatable; default TCP and QUIC on all interfaces, port 4001)")
	fs.Var(&boot, "bootstrap", "multiaddr with /p2p/ID of a peer to join through (repeatable)")
	var advertise listFlag
	fs.Var(&advertise, "advertise", "multiaddr to advertise besides the listen addresses (repeatable), e.g. /dns4/relay.example.org/tcp/4001: a name or public address others reach this peer at (AutoRelay builds a NAT'd client's relayed addresses from its relays' public addresses only)")
	keyPath := fs.String("key", "peer.key", "file holding this peer's identity key (made if missing)")
	identitySeed := fs.String("identity-seed", "", "derive the identity from this `text` instead of --key, so that its peer ID is known ahead ('peer id --identity-seed TEXT' prints it): for test beds and clusters, as whoever knows the text holds the key")
	httpAddr := fs.String("http", "", "serve status as JSON on this address, e.g. 127.0.0.1:8080")
	metricsAddr := fs.String("metrics", "", "serve Prometheus metrics on this address at "+metricsPath+", e.g. 127.0.0.1:9090: the peer's superpeer_*, go-libp2p's libp2p_*, the Go runtime's and the process's")
	refresh := fs.Duration("refresh", 10*time.Minute, "routing-table refresh interval")
	method := fs.String("method", "none", "superpeer selection: "+methodList()+"; or none (the DHT only)")
	superpeers := fs.Int("superpeers", 16, "S, the number of superpeers wanted (with --method prefix or repel)")
	pow2 := fs.Bool("pow2", false, "prefix: Lo et al.'s 2^⌈log2 S⌉ groups instead of exactly S")
	fraction := fs.Float64("fraction", 0, "make S follow this fraction of the network, agreed with the other peers (the census; --superpeers is only where this peer starts; every peer should run the same fraction); the capacity is then 2⌈1/fraction⌉ unless --capacity is given (0: S fixed)")
	capacity := fs.Int("capacity", 64, "C, the most clients this peer serves as a superpeer (0: unbounded)")
	ttl := fs.Duration("ttl", 30*time.Second, "attachment lifetime without renewal; the peer rechecks every third of it")
	displace := fs.Duration("displace", superpeer.DefaultDisplace, "repel: as a full superpeer, take a client whose regret (its next choice's RTT minus ours) exceeds a served client's by more than this in that client's place (0: first come, first served)")
	def := repel.DefaultConfig()
	force := fs.String("force", "attract", "repel: the force model, repulsion (Lo et al.'s) or attract (toward the clients a token serves)")
	settle := fs.Duration("settle", def.SettleAfter, "repel: T_settle, how long a peer holds a token before it is a superpeer")
	dead := fs.Duration("dead", def.DeadAfter, "repel: T_dead, how long a token may go unheard before it is minted again; must exceed 2 × --announce")
	survey := fs.Duration("survey", def.SurveyInterval, "repel: as a settled holder, survey the place this long after settling (then twice as long after each survey that keeps it): candidates among the clients measure their RTTs to the clients, and the token moves to one measured better (0: no surveys)")
	guard := fs.Bool("guard", false, "repel: guard the tokens: a token changes hands only by its live holder's signed hand-over, so a peer cannot take one by announcing a higher epoch; a token minted on both sides of a partition longer than T_dead then stays held on both until one holder leaves (every peer of one network should run the same)")
	announce := fs.Duration("announce", def.AnnounceInterval, "repel: how often a settled holder announces its token (a moving one: every "+def.MovingAnnounceInterval.String()+" or this, whichever is shorter)")
	vivInterval := fs.Duration("vivaldi-interval", 2*time.Second, "repel: how often the peer measures one peer for its Vivaldi coordinate")
	rttFlag := fs.String("rtt", "transport", "repel: a Vivaldi sample's RTT: transport (the kernel's minimum RTT of the TCP connection on Linux, quic-go's of a QUIC one; the exchange timed where neither is known) or exchange (the request and reply timed by the peer, which a busy machine stretches)")
	gossipFlag := fs.String("gossip", "piggyback", "repel: how token announcements travel: piggyback (signed, on the Vivaldi exchanges; holders send theirs to each other directly) or gossipsub; every peer of one network needs the same")
	puzzle := fs.Int("id-puzzle", 0, "prefix: only identities with this many leading zero bits of SHA-256(key) are superpeers (S/Kademlia's static puzzle: about 2^c key derivations once for an honest peer, for every try of an attacker grinding for a group); a new identity is made to solve it; every peer of one network needs the same")
	saltHex := fs.String("salt", "", "prefix: salt the group keys with these 32 bytes (64 hex digits) drawn when the network starts and given to every peer, so that an identity made before it is no nearer its group's key than any other (every peer of one network needs the same)")
	webAddr := fs.String("web", "", "serve a live map of this peer's own view on this address (e.g. 127.0.0.1:8080): its neighbours, the tokens it knows, its superpeer or its clients")
	relayMode := fs.String("relay", "off", "circuit relays for peers behind NAT: superpeer (superpeers run a relay bounded by --capacity, and a NAT'd peer's AutoRelay takes its own superpeer first, then the other superpeers it knows, nearest first), random (go-libp2p's relay service on every public peer, AutoRelay choosing among routing-table peers at random: the baseline), or off")
	reach := fs.String("reachability", "auto", "public, private (behind a NAT or firewall: find relays at once) or auto (go-libp2p decides; with no AutoNAT server around it stays unknown)")
	if err := parseFlagsEnv(fs, args); err != nil {
		return err
	}
	dissemination, err := repel.ParseDissemination(*gossipFlag)
	if err != nil {
		return fmt.Errorf("%w: --gossip: %v", errUsage, err)
	}
	if len(listen) == 0 {
		listen = listFlag{"/ip4/0.0.0.0/tcp/4001", "/ip4/0.0.0.0/udp/4001/quic-v1"}
	}
	var listenAddrs []ma.Multiaddr
	for _, s := range listen {
		a, err := ma.NewMultiaddr(s)
		if err != nil {
			return fmt.Errorf("%w: --listen %q: %v", errUsage, s, err)
		}
		listenAddrs = append(listenAddrs, a)
	}
	var advertiseAddrs []ma.Multiaddr
	for _, s := range advertise {
		a, err := ma.NewMultiaddr(s)
		if err != nil {
			return fmt.Errorf("%w: --advertise %q: %v", errUsage, s, err)
		}
		advertiseAddrs = append(advertiseAddrs, a)
	}
	var bootInfos []peer.AddrInfo
	for _, s := range boot {
		ai, err := peer.AddrInfoFromString(s)
		if err != nil {
			return fmt.Errorf("%w: --bootstrap %q: %v (want a multiaddr ending in /p2p/PEER-ID)", errUsage, s, err)
		}
		bootInfos = append(bootInfos, *ai)
	}
	switch {
	case *puzzle < 0 || *puzzle > superpeer.MaxPuzzleBits:
		return fmt.Errorf("%w: --id-puzzle %d not in [0, %d]", errUsage, *puzzle, superpeer.MaxPuzzleBits)
	case (*puzzle > 0 || *saltHex != "") && *method != "prefix":
		return fmt.Errorf("%w: --id-puzzle and --salt need --method prefix", errUsage)
	case *refresh <= 0:
		return fmt.Errorf("%w: --refresh %v must be positive", errUsage, *refresh)
	case *method != "none" && !registered(*method):
		return fmt.Errorf("%w: --method %q: want %s or none", errUsage, *method, strings.Join(methodNames(), ", "))
	case *superpeers < 1:
		return fmt.Errorf("%w: --superpeers %d must be at least 1", errUsage, *superpeers)
	case math.IsNaN(*fraction) || *fraction < 0 || *fraction > 1:
		return fmt.Errorf("%w: --fraction %v not in (0, 1] (0: S fixed)", errUsage, *fraction)
	case *fraction > 0 && (*method != "prefix" && *method != "repel" || *pow2):
		return fmt.Errorf("%w: --fraction needs --method prefix (without --pow2) or repel", errUsage)
	case *capacity < 0:
		return fmt.Errorf("%w: --capacity %d is negative", errUsage, *capacity)
	case *displace < 0:
		return fmt.Errorf("%w: --displace %v is negative", errUsage, *displace)
	case *survey < 0:
		return fmt.Errorf("%w: --survey %v is negative", errUsage, *survey)
	case *ttl < 100*time.Millisecond:
		return fmt.Errorf("%w: --ttl %v is below 100ms", errUsage, *ttl)
	case *force != "attract" && *force != "repulsion":
		return fmt.Errorf("%w: --force %q: want repulsion or attract", errUsage, *force)
	case *settle <= 0:
		return fmt.Errorf("%w: --settle %v must be positive", errUsage, *settle)
	case *announce <= 0:
		return fmt.Errorf("%w: --announce %v must be positive", errUsage, *announce)
	case *dead <= 2**announce:
		return fmt.Errorf("%w: --dead %v must exceed 2 × --announce (%v), or one lost announcement gets a live token minted again", errUsage, *dead, *announce)
	case *rttFlag != "transport" && *rttFlag != "exchange":
		return fmt.Errorf("%w: --rtt %q: want transport or exchange", errUsage, *rttFlag)
	case *vivInterval < time.Millisecond:
		return fmt.Errorf("%w: --vivaldi-interval %v is below 1ms", errUsage, *vivInterval)
	case *relayMode != "off" && *relayMode != "superpeer" && *relayMode != "random":
		return fmt.Errorf("%w: --relay %q: want superpeer, random or off", errUsage, *relayMode)
	case *relayMode == "superpeer" && *method == "none":
		return fmt.Errorf("%w: --relay superpeer needs a selection --method", errUsage)
	case *reach != "auto" && *reach != "public" && *reach != "private":
		return fmt.Errorf("%w: --reachability %q: want auto, public or private", errUsage, *reach)
	case *method == "repel" && *ttl < repelMinTTL:
		return fmt.Errorf("%w: --ttl %v: with --method repel it must be at least %v (clients renew at most once per %v move interval)", errUsage, *ttl, repelMinTTL, def.MoveInterval)
	}
	rcfg := repelConfig(*superpeers, *force, *settle, *dead, *announce)
	rcfg.SurveyInterval = *survey
	rcfg.Guard = *guard
	if err := rcfg.Validate(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	var salt [32]byte
	if *saltHex != "" {
		b, err := hex.DecodeString(*saltHex)
		if err != nil || len(b) != len(salt) {
			return fmt.Errorf("%w: --salt %q: want 64 hex digits", errUsage, *saltHex)
		}
		copy(salt[:], b)
	}
	key, made, err := peerIdentity(*identitySeed, *keyPath, *puzzle)
	if err != nil {
		return err
	}
	// With --metrics every component registers on one fresh registry
	// (metricsReg); without, none registers anything of ours.
	var (
		metricsReg prometheus.Registerer
		gatherer   prometheus.Gatherer
	)
	hostOpts := []libp2p.Option{
		libp2p.Identity(key),
		libp2p.ListenAddrs(listenAddrs...),
		libp2p.DefaultTransports,
	}
	if *metricsAddr != "" {
		reg := newMetricsRegistry()
		metricsReg, gatherer = reg, reg
		hostOpts = append(hostOpts, libp2p.PrometheusRegisterer(reg))
	}
	refused := &limits.Refusals{}
	mgr, err := peerhost.ResourceManager(refused, metricsReg != nil, false)
	if err != nil {
		return fmt.Errorf("resource manager: %w", err)
	}
	hostOpts = append(hostOpts, libp2p.ResourceManager(mgr))
	relays, err := newRelaying(*relayMode, *reach)
	if err != nil {
		return err
	}
	hostOpts = append(hostOpts, relays.hostOptions()...)
	if len(advertiseAddrs) > 0 {
		hostOpts = append(hostOpts, libp2p.AddrsFactory(func(addrs []ma.Multiaddr) []ma.Multiaddr {
			return append(addrs, advertiseAddrs...)
		}))
	}
	h, err := libp2p.New(hostOpts...)
	if err != nil {
		return fmt.Errorf("host: %w", err)
	}
	defer h.Close()
	logger := log.New(stdout, "", log.LstdFlags|log.Lmicroseconds)
	if id, _ := peer.IDFromPrivateKey(key); *puzzle > 0 && !superpeer.SolvesPuzzle(id, *puzzle) {
		logger.Printf("this identity has %d puzzle bits, fewer than --id-puzzle %d: the peer is a client only (move %s aside for a new identity that solves it)", superpeer.PuzzleBits(id), *puzzle, *keyPath)
	}
	if made {
		logger.Printf("made a new identity in %s", *keyPath)
	}
	logger.Printf("peer %s", h.ID())
	var skipped bool
	if bootInfos, skipped = withoutSelf(bootInfos, h.ID()); skipped {
		logger.Printf("bootstrap: skipping this peer's own address (%d other bootstrap peers)", len(bootInfos))
	}
	for _, a := range h.Addrs() {
		logger.Printf("listening on %s/p2p/%s", a, h.ID())
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	nodeOpts := []dht.Option{dht.WithBootstrap(bootInfos...), dht.WithRoutingTableRefresh(*refresh)}
	if *reach == "private" {
		// A peer others cannot dial serves no part of the DHT: as a
		// kad-dht client it is in nobody's routing table.
		nodeOpts = append(nodeOpts, dht.WithKadOptions(kaddht.Mode(kaddht.ModeClient)))
	}
	if *method == "repel" && dissemination == repel.GossipSub {
		// GossipSub's defaults: a real deployment has no swarm's hundreds
		// of peers per process.
		nodeOpts = append(nodeOpts, dht.WithGossipSub())
	}
	if metricsReg != nil {
		nodeOpts = append(nodeOpts, dht.WithRegisterer(metricsReg))
	}
	node, err := dht.New(ctx, h, nodeOpts...)
	if err != nil {
		return err
	}
	defer node.Close()
	var (
		sel     superpeer.Selector
		rsel    *repel.Selector
		started string // logged once the selector runs
	)
	if *method != "none" {
		m, err := superpeer.Lookup(*method)
		if err != nil {
			return err
		}
		env := superpeer.Env{Superpeers: *superpeers, Attach: []superpeer.Option{superpeer.WithCapacity(*capacity), superpeer.WithTTL(*ttl)}, Registerer: metricsReg}
		started = fmt.Sprintf("selecting superpeers by %s: S = %d", m.Name, *superpeers)
		switch m.Name {
		case "prefix":
			var opts []superpeer.Option
			if *pow2 {
				opts = append(opts, superpeer.WithPow2())
			}
			if *puzzle > 0 {
				opts = append(opts, superpeer.WithIDPuzzle(*puzzle))
			}
			if *saltHex != "" {
				opts = append(opts, superpeer.WithSalt(func(time.Time) [32]byte { return salt }))
			}
			if *fraction > 0 {
				opts = append(opts, superpeer.WithFraction(*fraction))
				if !flagSet(fs, "capacity") {
					env.Attach = []superpeer.Option{superpeer.WithTTL(*ttl)}
				}
				started = fmt.Sprintf("selecting superpeers by %s: S following %g of the network, starting at %d", m.Name, *fraction, *superpeers)
			}
			env.Options = opts
		case "repel":
			if *fraction > 0 {
				rcfg.Fraction = *fraction
				if !flagSet(fs, "capacity") {
					env.Attach = []superpeer.Option{superpeer.WithTTL(*ttl)}
				}
				started = fmt.Sprintf("selecting superpeers by %s: S following %g of the network, starting at %d", m.Name, *fraction, *superpeers)
			}
			env.Attach = append(env.Attach, superpeer.WithDisplace(*displace))
			env.Options = []repel.Option{repel.WithConfig(rcfg), repel.WithDissemination(dissemination)}
			started += fmt.Sprintf(", force %s, T_settle %v, T_dead %v, announce every %v by %s",
				rcfg.Model, rcfg.SettleAfter, rcfg.DeadAfter, rcfg.AnnounceInterval, dissemination)
		}
		if m.Coordinates {
			// Vivaldi samples the routing table's peers, half of the
			// time one of the 16 nearest by coordinate, as the swarm's
			// peers do.
			vivOpts := []vivaldi.Option{vivaldi.WithInterval(*vivInterval), vivaldi.WithPeerSource(func() []peer.ID {
				return node.RoutingTable().ListPeers()
			})}
			if metricsReg != nil {
				vivOpts = append(vivOpts, vivaldi.WithRegisterer(metricsReg))
			}
			if *rttFlag == "transport" {
				vivOpts = append(vivOpts, vivaldi.WithConnRTT(connrtt.Of))
			}
			viv, err := vivaldi.NewService(h, vivOpts...)
			if err != nil {
				return err
			}
			defer viv.Close()
			env.Vivaldi = viv
			started += fmt.Sprintf(", Vivaldi sample every %v (RTT: %s)", *vivInterval, *rttFlag)
		}
		if sel, err = m.New(node, env); err != nil {
			return err
		}
		defer sel.Close()
		if ps, ok := sel.(*superpeer.PrefixSelector); ok {
			started += fmt.Sprintf(", group %d of %d", ps.Scheme().Group(node.Key()), ps.Scheme().Groups())
		}
		rsel, _ = sel.(*repel.Selector)
	}
	if err := relays.bind(h, node, sel); err != nil {
		return err
	}
	defer relays.Close()
	if relays.mode != "off" {
		logger.Printf("relays: %s, reachability %s", relays.mode, relays.reach)
	}
	if *httpAddr != "" {
		ln, err := net.Listen("tcp", *httpAddr)
		if err != nil {
			return fmt.Errorf("--http %s: %w", *httpAddr, err)
		}
		srv := &http.Server{Handler: statusHandler(node, sel, rsel, refused, relays), ReadHeaderTimeout: 5 * time.Second}
		go srv.Serve(ln)
		defer srv.Close()
		logger.Printf("status on http://%s/status", ln.Addr())
	}
	if *webAddr != "" {
		m, err := startPeerWeb(*webAddr, node, sel)
		if err != nil {
			return err
		}
		defer m.Close()
		logger.Printf("web map on %s", m.URL())
	}
	if gatherer != nil {
		ln, err := net.Listen("tcp", *metricsAddr)
		if err != nil {
			return fmt.Errorf("--metrics %s: %w", *metricsAddr, err)
		}
		srv := &http.Server{Handler: metricsHandler(gatherer), ReadHeaderTimeout: 5 * time.Second}
		go srv.Serve(ln)
		defer srv.Close()
		logger.Printf("metrics on http://%s%s", ln.Addr(), metricsPath)
	}
	if len(bootInfos) > 0 {
		// A bootstrap peer that is not up yet is not fatal: keep trying.
		for {
			bctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			err := node.Bootstrap(bctx)
			cancel()
			if bootstrapped(err, node.RoutingTable().Size()) {
				if err != nil {
					logger.Printf("bootstrap: %v after joining; going on (the routing-table refresh fills the rest)", err)
				}
				break
			}
			logger.Printf("bootstrap: %v (retrying)", err)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(2 * time.Second):
			}
		}
		logger.Printf("bootstrapped: routing table has %d peers", node.RoutingTable().Size())
	}
	if sel != nil {
		changes, cancel := sel.Subscribe()
		defer cancel()
		go func() {
			for c := range changes {
				logger.Printf("role %s, superpeer %s (%s)", c.Role, c.Superpeer, c.Reason)
			}
		}()
		if err := sel.Start(ctx); err != nil {
			return err
		}
		logger.Printf("%s", started)
		if rsel != nil {
			go watchToken(ctx, rsel, logger)
		}
	}
	watchRoutingTable(ctx, node, logger)
	logger.Printf("shutting down")
	return nil
}

// bootstrapped is whether a bootstrap attempt that ended with err, leaving
// rtSize peers in the routing table, lets the peer go on: a bootstrap joins
// (a bootstrap peer in the routing table, a lookup of the own key) and then
// refreshes every bucket, and with Internet RTTs on a loaded machine the
// refresh can outlast the attempt's 30 s; a peer that has joined goes on
// and leaves the rest to the periodic refresh instead of starting over.
func bootstrapped(err error, rtSize int) bool {
	return err == nil || rtSize > 0 && errors.Is(err, context.DeadlineExceeded)
}

// methodList describes the registered methods for --method's help.
func methodList() string {
	var parts []string
	for _, m := range superpeer.Methods() {
		parts = append(parts, m.Name+" — "+m.Summary)
	}
	return strings.Join(parts, "; ")
}

// methodNames are the names of the registered methods, in
// superpeer.Methods' order.
func methodNames() []string {
	var names []string
	for _, m := range superpeer.Methods() {
		names = append(names, m.Name)
	}
	return names
}

// registered is whether a method of that name is registered.
func registered(name string) bool {
	_, err := superpeer.Lookup(name)
	return err == nil
}

// watchToken logs the repel tokens this peer takes and gives up (minted,
// handed over, fenced), and the token events behind them, until ctx ends;
// roles are logged as changes.
func watchToken(ctx context.Context, rsel *repel.Selector, logger *log.Logger) {
	var last repel.Token
	had := false
	seen := map[string]uint64{}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		if evs := tokenEvents(seen, rsel.Stats()); len(evs) > 0 {
			logger.Printf("token events: %s", strings.Join(evs, ", "))
		}
		t, ok := rsel.Held()
		switch {
		case ok && (!had || t.ID != last.ID || t.Epoch != last.Epoch):
			logger.Printf("holding token %d (epoch %d, %d moves); superpeer after T_settle", t.ID, t.Epoch, t.Moves)
		case !ok && had:
			logger.Printf("no longer holding token %d (epoch %d)", last.ID, last.Epoch)
		}
		last, had = t, ok
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// tokenEvents are the token events (repel.EventKind, by name) that stats
// counts beyond seen, as "kind count" in EventKind order; seen is brought
// up to stats. A peer's log then says why its token moved (a survey, a
// region survey or the coordinates alone: a move offered with neither).
func tokenEvents(seen, stats map[string]uint64) []string {
	var evs []string
	for _, k := range repel.EventKinds() {
		name := k.String()
		if stats[name] > seen[name] {
			evs = append(evs, fmt.Sprintf("%s %d", name, stats[name]-seen[name]))
		}
		seen[name] = stats[name]
	}
	return evs
}

// repelConfig is the token method for one peer on the Internet:
// repel.DefaultConfig with S tokens, the force model and the timers of the
// flags. A moving token announces every DefaultConfig's
// MovingAnnounceInterval, or every announce if that is shorter.
func repelConfig(S int, force string, settle, dead, announce time.Duration) repel.Config {
	c := repel.DefaultConfig()
	c.Tokens = S
	c.Model = repel.Attract
	if force == "repulsion" {
		c.Model = repel.Repulsion
	}
	c.SettleAfter = settle
	c.DeadAfter = dead
	c.AnnounceInterval = announce
	c.MovingAnnounceInterval = min(c.MovingAnnounceInterval, announce)
	return c
}

// watchRoutingTable logs peers as they enter and leave the routing table
// (looking once a second) until ctx ends.
func watchRoutingTable(ctx context.Context, node *dht.Node, logger *log.Logger) {
	known := map[peer.ID]bool{}
	// Once a second: at five times a second this loop was 3% of the CPU of
	// a 120-process test bed whose peers shared two cores.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		now := map[peer.ID]bool{}
		for _, p := range node.RoutingTable().ListPeers() {
			now[p] = true
			if !known[p] {
				logger.Printf("found peer %s (routing table %d, network ~%d)", p, node.RoutingTable().Size(), node.NetworkSize())
			}
		}
		for p := range known {
			if !now[p] {
				logger.Printf("lost peer %s (routing table %d)", p, len(now))
			}
		}
		known = now
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

type status struct {
	ID        string   `json:"id"`
	Role      string   `json:"role,omitempty"`
	Superpeer string   `json:"superpeer,omitempty"`
	Clients   []string `json:"clients,omitempty"`
	// Coord is the peer's Vivaldi coordinate (seconds) and its own error
	// estimate (method repel).
	Coord *coordReport `json:"coord,omitempty"`
	// Token is the token this peer holds (method repel; absent if none).
	Token *tokenStatus `json:"token,omitempty"`
	// KnownTokens is how many tokens the peer has heard of within T_dead
	// (method repel).
	KnownTokens *int `json:"known_tokens,omitempty"`
	// Superpeers is the superpeer count S this peer holds and, for repel,
	// the census version that set it (0 while it is the one it started
	// with; --fraction).
	Superpeers *countStatus `json:"superpeers,omitempty"`
	// Surveys are the peer's survey counts (method repel).
	Surveys      *surveyStatus     `json:"surveys,omitempty"`
	Key          string            `json:"key"`
	Addrs        []string          `json:"addrs"`
	RoutingTable []string          `json:"routing_table"`
	NetworkSize  int               `json:"network_size"`
	Drops        map[string]uint64 `json:"drops"`
	// Vivaldi counts a repel peer's samples, and those whose RTT was the
	// transport's (--rtt transport).
	Vivaldi *vivaldiStatus `json:"vivaldi,omitempty"`
	// Relay is the peer's circuit relays (with --relay): the relays it
	// holds reservations with, and as a superpeer its own relay's load.
	Relay *relayStatus `json:"relay,omitempty"`
}

// vivaldiStatus counts a peer's Vivaldi samples.
type vivaldiStatus struct {
	Samples       uint64 `json:"samples"`
	TransportRTTs uint64 `json:"transport_rtts"`
}

// countStatus is the superpeer count a peer holds.
type countStatus struct {
	S       int    `json:"s"`
	Version uint64 `json:"version,omitempty"`
}

// tokenStatus is the token a repel peer holds.
type tokenStatus struct {
	ID    uint32 `json:"id"`
	Epoch uint64 `json:"epoch"`
	// Settled is true once the peer has held it for T_settle (it is then a
	// superpeer); Surveyed, once a survey has kept it where it is.
	Settled  bool `json:"settled"`
	Surveyed bool `json:"surveyed"`
}

// surveyStatus counts a repel peer's surveys: as a holder (surveys sent,
// and how they ended) and as a candidate, with the frames either way.
type surveyStatus struct {
	Surveys        uint64 `json:"surveys"`
	Moved          uint64 `json:"moved"`
	Kept           uint64 `json:"kept"`
	FramesSent     uint64 `json:"frames_sent"`
	FramesReceived uint64 `json:"frames_received"`
}

// statusHandler serves /status; sel is nil without a selection method,
// rsel non-nil (and sel too) with the repel method; refused (if not nil)
// counts what the host's resource manager refused, shown as rcmgr/….
func statusHandler(node *dht.Node, sel superpeer.Selector, rsel *repel.Selector, refused *limits.Refusals, relays *relaying) http.Handler {
	mux := http.NewServeMux()
	if relays != nil {
		mux.Handle("/ping", relays.pingHandler(node.Host()))
	}
	mux.HandleFunc("/status", func(w http.ResponseWriter, r *http.Request) {
		st := status{ID: node.ID().String(), Key: node.Key().Hex(), NetworkSize: node.NetworkSize(), Drops: node.Stats().Drops()}
		for _, a := range node.Host().Addrs() {
			st.Addrs = append(st.Addrs, a.String())
		}
		for _, p := range node.RoutingTable().ListPeers() {
			st.RoutingTable = append(st.RoutingTable, p.String())
		}
		sort.Strings(st.RoutingTable)
		if sel != nil {
			st.Role, st.Superpeer = sel.Role().String(), sel.Superpeer().String()
			for _, c := range sel.Attach().Clients() {
				st.Clients = append(st.Clients, c.String())
			}
			for k, v := range sel.Attach().Drops() {
				st.Drops["attach/"+k] = v
			}
			if ps, ok := sel.(*superpeer.PrefixSelector); ok {
				st.Superpeers = &countStatus{S: ps.Scheme().Groups()}
			}
		}
		if rsel != nil {
			c := rsel.Vivaldi().Coordinate()
			st.Coord = &coordReport{Vec: c.Vec, Height: c.Height, Error: c.Error}
			vs := rsel.Vivaldi().Stats()
			st.Vivaldi = &vivaldiStatus{Samples: vs.Samples, TransportRTTs: vs.TransportRTTs}
			if t, ok := rsel.Held(); ok {
				st.Token = &tokenStatus{ID: t.ID, Epoch: t.Epoch, Settled: rsel.Role() == superpeer.Superpeer, Surveyed: rsel.Surveyed()}
			}
			stats := rsel.Stats()
			st.Surveys = &surveyStatus{
				Surveys: stats[repel.EventSurvey.String()], Moved: stats[repel.EventSurveyMoved.String()], Kept: stats[repel.EventSurveyKept.String()],
				FramesSent: stats["survey_frames_sent"], FramesReceived: stats["survey_frames_received"],
			}
			known := len(rsel.LiveTokens())
			st.KnownTokens = &known
			count := rsel.Count()
			st.Superpeers = &countStatus{S: count.S, Version: count.Version}
			for k, v := range rsel.Drops() {
				st.Drops["repel/"+k] = v
			}
			for k, v := range rsel.Vivaldi().Drops() {
				st.Drops["vivaldi/"+k] = v
			}
		}
		if refused != nil {
			for k, v := range refused.Snapshot() {
				st.Drops["rcmgr/"+k] = v
			}
		}
		st.Relay = relays.status(node.Host())
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(st)
	})
	return mux
}

// repelMinTTL is the shortest attachment lifetime a repel peer takes: a
// repel client renews at most once a move interval, and the attachment
// must outlive a lost renewal.
var repelMinTTL = 2 * repel.DefaultConfig().MoveInterval

// flagSet reports whether the flag name was given on the command line.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
