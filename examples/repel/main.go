// Command repel runs the repel method on a few libp2p hosts in one process,
// over TCP on 127.0.0.1: every host joins the DHT and runs Vivaldi
// (vivaldi.Service) and a repel.Selector with S tokens, on the short timers
// of repel.LocalConfig. Once S peers hold a settled token each and every
// other peer is the client of one of them, the program prints each peer's
// role and superpeer and exits.
//
//	go run ./examples/repel -seed 1
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand"
	"os"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"

	"github.com/superpeer-overlay/superpeer/dht"
	"github.com/superpeer-overlay/superpeer/repel"
	"github.com/superpeer-overlay/superpeer/superpeer"
	"github.com/superpeer-overlay/superpeer/vivaldi"
)

func main() {
	seed := flag.Int64("seed", 1, "seed of the peers' identities, their Vivaldi sampling and their token models")
	n := flag.Int("n", 8, "peers")
	s := flag.Int("superpeers", 2, "S, the tokens and so the superpeers")
	limit := flag.Duration("timeout", 45*time.Second, "give up (exit 1) if not every peer is served by then")
	flag.Parse()
	if err := run(*seed, *n, *s, *limit, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "repel:", err)
		os.Exit(1)
	}
}

func run(seed int64, n, S int, limit time.Duration, out io.Writer) error {
	fmt.Fprintf(out, "seed %d: %d peers on 127.0.0.1, repel method, S = %d\n", seed, n, S)
	start := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rng := rand.New(rand.NewSource(seed))
	cfg := repel.LocalConfig() // timers for one machine: T_settle 2 s, T_dead 3.5 s
	cfg.Tokens = S
	var sels []*repel.Selector
	var ids []peer.ID
	var first peer.AddrInfo
	for i := range n {
		key, _, err := crypto.GenerateEd25519Key(rng)
		if err != nil {
			return err
		}
		h, err := libp2p.New(libp2p.Identity(key), libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"),
			libp2p.NoTransports, libp2p.Transport(tcp.NewTCPTransport))
		if err != nil {
			return err
		}
		defer h.Close()
		node, err := dht.New(ctx, h)
		if err != nil {
			return err
		}
		defer node.Close()
		if i == 0 {
			first = peer.AddrInfo{ID: h.ID(), Addrs: h.Addrs()}
		} else if err := node.Bootstrap(ctx, first); err != nil {
			return fmt.Errorf("peer %d: %w", i, err)
		}
		// Coordinates from samples of the routing table's peers, as `peer run` takes them.
		viv, err := vivaldi.NewService(h, vivaldi.WithInterval(50*time.Millisecond), vivaldi.WithSeed(seed+int64(i)),
			vivaldi.WithPeerSource(node.RoutingTable().ListPeers))
		if err != nil {
			return err
		}
		defer viv.Close()
		sel, err := repel.NewSelector(node,
			repel.WithVivaldi(viv),
			repel.WithConfig(cfg),
			repel.WithAttach(superpeer.WithTTL(2*time.Second)), // no capacity bound
			repel.WithSeed(uint64(seed)<<8+uint64(i)+1),
		)
		if err != nil {
			return err
		}
		defer sel.Close()
		if err := sel.Start(ctx); err != nil {
			return err
		}
		sels, ids = append(sels, sel), append(ids, h.ID())
	}

	// Served: S superpeers (settled holders), every other peer a client of one.
	served := func() error {
		sps := map[peer.ID]bool{}
		for _, sel := range sels {
			if sel.Role() == superpeer.Superpeer {
				sps[sel.Superpeer()] = true
			}
		}
		if len(sps) != S {
			return fmt.Errorf("%d superpeers, want %d", len(sps), S)
		}
		for i, sel := range sels {
			if !sps[sel.Superpeer()] {
				return fmt.Errorf("peer %d is %s served by %q", i, sel.Role(), sel.Superpeer())
			}
		}
		return nil
	}
	deadline := time.Now().Add(limit)
	for err := served(); err != nil; err = served() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not every peer served within %v: %w", limit, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for i, sel := range sels {
		fmt.Fprintf(out, "peer %d %s %-9s superpeer %s\n", i, ids[i], sel.Role(), sel.Superpeer())
	}
	fmt.Fprintf(out, "every peer served after %.1f s\n", time.Since(start).Seconds())
	return nil
}
