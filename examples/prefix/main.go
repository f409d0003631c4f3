// Command prefix runs the prefix method on a few libp2p hosts in one
// process, over TCP on 127.0.0.1: every host joins the DHT, runs a
// superpeer.PrefixSelector for S superpeers, and once every peer is served
// by the superpeer its group key calls for (the peer XOR-closest to it), the
// program prints each peer's role and superpeer and exits.
//
//	go run ./examples/prefix -seed 1
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
	"github.com/superpeer-overlay/superpeer/superpeer"
)

func main() {
	seed := flag.Int64("seed", 1, "seed of the peers' identities (the same seed, the same peers and superpeers)")
	n := flag.Int("n", 8, "peers")
	s := flag.Int("superpeers", 2, "S, the superpeers wanted")
	limit := flag.Duration("timeout", 40*time.Second, "give up (exit 1) if not every peer is served by then")
	flag.Parse()
	if err := run(*seed, *n, *s, *limit, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "prefix:", err)
		os.Exit(1)
	}
}

func run(seed int64, n, S int, limit time.Duration, out io.Writer) error {
	fmt.Fprintf(out, "seed %d: %d peers on 127.0.0.1, prefix method, S = %d\n", seed, n, S)
	start := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rng := rand.New(rand.NewSource(seed))
	var (
		sels  []*superpeer.PrefixSelector
		nodes []*dht.Node
		first peer.AddrInfo
	)
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
		node, err := dht.New(ctx, h) // kad-dht under /superpeer, never the public DHT
		if err != nil {
			return err
		}
		defer node.Close()
		if i == 0 {
			first = peer.AddrInfo{ID: h.ID(), Addrs: h.Addrs()}
		} else if err := node.Bootstrap(ctx, first); err != nil {
			return fmt.Errorf("peer %d: %w", i, err)
		}
		sel, err := superpeer.NewPrefix(node,
			superpeer.WithSuperpeers(S),
			superpeer.WithTTL(3*time.Second), // no capacity bound
		)
		if err != nil {
			return err
		}
		defer sel.Close()
		if err := sel.Start(ctx); err != nil {
			return err
		}
		sels, nodes = append(sels, sel), append(nodes, node)
	}

	// want is the superpeer peer i's group calls for: the peer XOR-closest
	// to its superpeer key, key(i) AND mask.
	want := func(i int) peer.ID {
		sk := sels[i].Scheme().SuperpeerKey(nodes[i].Key())
		best := 0
		for j := range nodes {
			if sk.Closer(nodes[j].Key(), nodes[best].Key()) {
				best = j
			}
		}
		return nodes[best].ID()
	}
	served := func() error {
		for i, sel := range sels {
			if w, got := want(i), sel.Superpeer(); got != w {
				return fmt.Errorf("peer %d is %s served by %q, want %s", i, sel.Role(), got, w)
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
		fmt.Fprintf(out, "peer %d %s group %d %-9s superpeer %s\n",
			i, nodes[i].ID(), sel.Scheme().Group(nodes[i].Key()), sel.Role(), sel.Superpeer())
	}
	fmt.Fprintf(out, "every peer served after %.1f s\n", time.Since(start).Seconds())
	return nil
}
