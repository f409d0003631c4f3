package testbed

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"strings"
	"time"

	"github.com/superpeer-overlay/superpeer/experiments/latency"
)

// Prefix starts the name of every namespace and link a test bed makes.
const Prefix = "sptb-"

// MaxPeers is the most namespaces one bed holds: addresses 1 … MaxPeers of
// the /16, below the router's and the bridge's.
const MaxPeers = 65000

// Shaper names how the delays are made.
type Shaper string

const (
	// Netem shapes each namespace's egress with an HTB class and a netem
	// qdisc per destination.
	Netem Shaper = "netem"
	// TUN routes every packet through a user-space delay line in a router
	// namespace.
	TUN Shaper = "tun"
)

// Config is what a bed is planned from.
type Config struct {
	// N is the number of peer namespaces.
	N int
	// RunID tells this bed's names from another's: 4 lowercase hex digits.
	RunID string
	// Octet is the second octet of the bed's subnet, 10.Octet.0.0/16.
	Octet int
	// RTT is the peers' RTT space in milliseconds (peer i is row i).
	RTT latency.RTTs
	// Shaper makes the delays.
	Shaper Shaper
	// Loss is the chance in [0, 1) that a packet is dropped on its way out
	// of a namespace (each way, so a round trip loses about twice that).
	Loss float64
	// Jitter is the most a packet's delay varies either way (uniform in
	// ±Jitter with tun, netem's normal-ish default with netem).
	Jitter time.Duration
	// NAT puts peer i behind a masquerading NAT if NAT[i] (nil: no peer
	// is; else one entry a peer). See NATed.
	NAT []bool
}

// Plan is a bed's names, addresses and delays. It is pure: nothing is made
// until Bed.Up applies it.
type Plan struct {
	Config
	subnet netip.Prefix
}

// ErrConfig is a Config that cannot be planned.
var ErrConfig = errors.New("testbed: bad config")

// NewPlan checks cfg and plans the bed.
func NewPlan(cfg Config) (*Plan, error) {
	switch {
	case cfg.N < 1 || cfg.N > MaxPeers:
		return nil, fmt.Errorf("%w: %d peers (want 1 … %d)", ErrConfig, cfg.N, MaxPeers)
	case !validRunID(cfg.RunID):
		return nil, fmt.Errorf("%w: run ID %q (want 4 lowercase hex digits)", ErrConfig, cfg.RunID)
	case cfg.Octet < 0 || cfg.Octet > 255:
		return nil, fmt.Errorf("%w: subnet octet %d", ErrConfig, cfg.Octet)
	case cfg.RTT == nil || cfg.RTT.Len() < cfg.N:
		return nil, fmt.Errorf("%w: RTT space smaller than %d peers", ErrConfig, cfg.N)
	case cfg.Shaper != Netem && cfg.Shaper != TUN:
		return nil, fmt.Errorf("%w: shaper %q (want netem or tun)", ErrConfig, cfg.Shaper)
	case !(cfg.Loss >= 0 && cfg.Loss < 1):
		return nil, fmt.Errorf("%w: loss %v (want [0, 1))", ErrConfig, cfg.Loss)
	case cfg.Jitter < 0:
		return nil, fmt.Errorf("%w: negative jitter %v", ErrConfig, cfg.Jitter)
	case cfg.NAT != nil && len(cfg.NAT) != cfg.N:
		return nil, fmt.Errorf("%w: NAT for %d peers, not %d", ErrConfig, len(cfg.NAT), cfg.N)
	}
	for i := 0; i < cfg.N; i++ {
		for j := 0; j < cfg.N; j++ {
			if r := cfg.RTT.RTT(i, j); i != j && !(r >= 0 && r < 60_000) {
				return nil, fmt.Errorf("%w: RTT(%d, %d) = %v ms (fill the matrix first)", ErrConfig, i, j, r)
			}
		}
	}
	p := &Plan{Config: cfg}
	p.NAT = append([]bool(nil), cfg.NAT...) // the plan's own, nil if none
	p.subnet = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(cfg.Octet), 0, 0}), 16)
	return p, nil
}

func validRunID(s string) bool {
	if len(s) != 4 {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// Subnet is the bed's /16.
func (p *Plan) Subnet() netip.Prefix { return p.subnet }

// Addr is peer i's address: the subnet's (i+1)th.
func (p *Plan) Addr(i int) netip.Addr {
	k := i + 1
	return netip.AddrFrom4([4]byte{10, byte(p.Octet), byte(k >> 8), byte(k)})
}

// Index is the peer with address a, or -1.
func (p *Plan) Index(a netip.Addr) int {
	if !a.Is4() {
		return -1
	}
	b := a.As4()
	if b[0] != 10 || int(b[1]) != p.Octet {
		return -1
	}
	i := int(b[2])<<8 | int(b[3]) - 1
	if i < 0 || i >= p.N {
		return -1
	}
	return i
}

// RouterAddr is the router namespace's address (tun shaper).
func (p *Plan) RouterAddr() netip.Addr {
	return netip.AddrFrom4([4]byte{10, byte(p.Octet), 255, 253})
}

// BridgeAddr is the bridge's address in the root namespace: where the test
// bed reads the peers' /status from, undelayed.
func (p *Plan) BridgeAddr() netip.Addr {
	return netip.AddrFrom4([4]byte{10, byte(p.Octet), 255, 254})
}

// runPrefix starts every name of this run.
func (p *Plan) runPrefix() string { return Prefix + p.RunID }

// Namespace is peer i's network namespace.
func (p *Plan) Namespace(i int) string { return fmt.Sprintf("%s-%d", p.runPrefix(), i) }

// RouterNamespace is the router's namespace (tun shaper).
func (p *Plan) RouterNamespace() string { return p.runPrefix() + "-r" }

// Bridge is the bridge's name.
func (p *Plan) Bridge() string { return p.runPrefix() + "br" }

// HostVeth is the root namespace's end of peer i's veth, a bridge port (at
// most 15 characters: i below 100 000).
func (p *Plan) HostVeth(i int) string { return fmt.Sprintf("%sv%d", p.runPrefix(), i) }

// RouterVeth is the root namespace's end of the router's veth.
func (p *Plan) RouterVeth() string { return p.runPrefix() + "vr" }

// Owns is whether a namespace or link name is this run's.
func (p *Plan) Owns(name string) bool { return strings.HasPrefix(name, p.runPrefix()) }

// InnerDev is the namespace's end of every veth.
const InnerDev = "eth0"

// TunDev is the TUN device in the router namespace.
const TunDev = "tun0"

// OneWay is the delay of a packet from peer i to peer j: half their RTT,
// to the microsecond. A matrix measured differently each way gives each
// way half its own RTT, so a round trip takes the mean of the two.
func (p *Plan) OneWay(i, j int) time.Duration {
	if i == j {
		return 0
	}
	return time.Duration(math.Round(p.RTT.RTT(i, j)*500)) * time.Microsecond
}

// Half splits peers in two: side[i] is 1 for the first half of order, 2
// for the rest (the larger half with an odd count), 0 for a peer of the n
// not in order. order is a seeded shuffle of the peers to split, so the
// halves mix the matrix's regions.
func Half(order []int, n int) []int {
	side := make([]int, n)
	for k, i := range order {
		side[i] = 1
		if k >= len(order)/2 {
			side[i] = 2
		}
	}
	return side
}
