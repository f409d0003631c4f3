package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
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
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/superpeer-overlay/superpeer/dht"
	"github.com/superpeer-overlay/superpeer/superpeer"
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
func loadIdentity(path string) (crypto.PrivKey, bool, error) {
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		k, err := crypto.UnmarshalPrivateKey(b)
		if err != nil {
			return nil, false, fmt.Errorf("identity key %s: %w", path, err)
		}
		return k, false, nil
	case errors.Is(err, fs.ErrNotExist):
		k, _, err := crypto.GenerateEd25519Key(rand.Reader)
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
	default:
		return nil, false, fmt.Errorf("identity key %s: %w", path, err)
	}
}

func runPeer(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("run", stderr)
	var listen, boot listFlag
	fs.Var(&listen, "listen", "multiaddr to listen on (repeatable; default TCP and QUIC on all interfaces, port 4001)")
	fs.Var(&boot, "bootstrap", "multiaddr with /p2p/ID of a peer to join through (repeatable)")
	keyPath := fs.String("key", "peer.key", "file holding this peer's identity key (made if missing)")
	httpAddr := fs.String("http", "", "serve status as JSON on this address, e.g. 127.0.0.1:8080")
	refresh := fs.Duration("refresh", 10*time.Minute, "routing-table refresh interval")
	method := fs.String("method", "none", "superpeer selection: prefix, or none (the DHT only)")
	superpeers := fs.Int("superpeers", 16, "S, the number of superpeers wanted (with --method prefix)")
	pow2 := fs.Bool("pow2", false, "prefix: the seed's 2^⌈log2 S⌉ groups instead of exactly S")
	capacity := fs.Int("capacity", 64, "C, the most clients this peer serves as a superpeer (0: unbounded)")
	ttl := fs.Duration("ttl", 30*time.Second, "attachment lifetime without renewal; the peer rechecks every third of it")
	if err := parseFlags(fs, args); err != nil {
		return err
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
	var bootInfos []peer.AddrInfo
	for _, s := range boot {
		ai, err := peer.AddrInfoFromString(s)
		if err != nil {
			return fmt.Errorf("%w: --bootstrap %q: %v (want a multiaddr ending in /p2p/PEER-ID)", errUsage, s, err)
		}
		bootInfos = append(bootInfos, *ai)
	}
	switch {
	case *refresh <= 0:
		return fmt.Errorf("%w: --refresh %v must be positive", errUsage, *refresh)
	case *method != "prefix" && *method != "none":
		return fmt.Errorf("%w: --method %q: want prefix or none", errUsage, *method)
	case *superpeers < 1:
		return fmt.Errorf("%w: --superpeers %d must be at least 1", errUsage, *superpeers)
	case *capacity < 0:
		return fmt.Errorf("%w: --capacity %d is negative", errUsage, *capacity)
	case *ttl < 100*time.Millisecond:
		return fmt.Errorf("%w: --ttl %v is below 100ms", errUsage, *ttl)
	}
	key, made, err := loadIdentity(*keyPath)
	if err != nil {
		return err
	}
	h, err := libp2p.New(
		libp2p.Identity(key),
		libp2p.ListenAddrs(listenAddrs...),
		libp2p.DefaultTransports,
	)
	if err != nil {
		return fmt.Errorf("host: %w", err)
	}
	defer h.Close()
	logger := log.New(stdout, "", log.LstdFlags|log.Lmicroseconds)
	if made {
		logger.Printf("made a new identity in %s", *keyPath)
	}
	logger.Printf("peer %s", h.ID())
	for _, a := range h.Addrs() {
		logger.Printf("listening on %s/p2p/%s", a, h.ID())
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	node, err := dht.New(ctx, h, dht.Bootstrap(bootInfos...), dht.RoutingTableRefresh(*refresh))
	if err != nil {
		return err
	}
	defer node.Close()
	var sel *superpeer.PrefixSelector
	if *method == "prefix" {
		sel, err = superpeer.NewPrefix(node, superpeer.PrefixOptions{
			Superpeers: *superpeers, Pow2: *pow2,
			Attach: superpeer.AttachOptions{Capacity: *capacity, TTL: *ttl},
		})
		if err != nil {
			return err
		}
		defer sel.Close()
	}
	if *httpAddr != "" {
		ln, err := net.Listen("tcp", *httpAddr)
		if err != nil {
			return fmt.Errorf("--http %s: %w", *httpAddr, err)
		}
		srv := &http.Server{Handler: statusHandler(node, sel), ReadHeaderTimeout: 5 * time.Second}
		go srv.Serve(ln)
		defer srv.Close()
		logger.Printf("status on http://%s/status", ln.Addr())
	}
	if len(bootInfos) > 0 {
		// A bootstrap peer that is not up yet is not fatal: keep trying.
		for {
			bctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			err := node.Bootstrap(bctx)
			cancel()
			if err == nil {
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
		logger.Printf("selecting superpeers by prefix: S = %d, group %d of %d", *superpeers, sel.Scheme().Group(node.Key()), sel.Scheme().Groups())
	}
	watchRoutingTable(ctx, node, logger)
	logger.Printf("shutting down")
	return nil
}

// watchRoutingTable logs peers as they enter and leave the routing table
// until ctx ends.
func watchRoutingTable(ctx context.Context, node *dht.Node, logger *log.Logger) {
	known := map[peer.ID]bool{}
	tick := time.NewTicker(200 * time.Millisecond)
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
	ID           string            `json:"id"`
	Role         string            `json:"role,omitempty"`
	Superpeer    string            `json:"superpeer,omitempty"`
	Clients      []string          `json:"clients,omitempty"`
	Key          string            `json:"key"`
	Addrs        []string          `json:"addrs"`
	RoutingTable []string          `json:"routing_table"`
	NetworkSize  int               `json:"network_size"`
	Drops        map[string]uint64 `json:"drops"`
}

func statusHandler(node *dht.Node, sel *superpeer.PrefixSelector) http.Handler {
	mux := http.NewServeMux()
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
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(st)
	})
	return mux
}
