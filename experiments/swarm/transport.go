package swarm

import (
	"fmt"
	"net"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/connmgr"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	quic "github.com/libp2p/go-libp2p/p2p/transport/quic"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"

	"github.com/superpeer-overlay/superpeer/internal/peerhost"
)

// Transport is what a swarm's hosts speak.
type Transport string

const (
	// Mocknet is go-libp2p's simulated network in the process: every
	// link's latency is the RTT space's (the default).
	Mocknet Transport = "mocknet"
	// TCP is real TCP sockets, one listening port a host: the kernel's
	// latency (loopback's, on 127.0.0.1), not the RTT space's.
	TCP Transport = "tcp"
	// QUIC is real QUIC (v1) over UDP sockets, one a host.
	QUIC Transport = "quic"
)

// ParseTransport reads a transport's name ("" is Mocknet).
func ParseTransport(s string) (Transport, error) {
	switch t := Transport(s); t {
	case "", Mocknet:
		return Mocknet, nil
	case TCP, QUIC:
		return t, nil
	}
	return "", fmt.Errorf("swarm: transport %q: want mocknet, tcp or quic", s)
}

// Real reports whether t is a kernel socket transport.
func (t Transport) Real() bool { return t == TCP || t == QUIC }

// realHost builds a host on real sockets as `peer run` builds one (its
// resource manager, go-libp2p's defaults otherwise) but for the transport
// given and no relay, listening on ip at a port the kernel picks.
func realHost(t Transport, ip string, sk crypto.PrivKey, cm connmgr.ConnManager) (host.Host, error) {
	parsed := net.ParseIP(ip)
	if parsed == nil {
		return nil, fmt.Errorf("swarm: listen address %q is not an IP address", ip)
	}
	family := "ip4"
	if parsed.To4() == nil {
		family = "ip6"
	}
	mgr, err := peerhost.ResourceManager(nil, false, false, peerhost.WithoutIPLimits())
	if err != nil {
		return nil, err
	}
	opts := []libp2p.Option{
		libp2p.Identity(sk), libp2p.NoTransports, libp2p.ResourceManager(mgr),
		libp2p.DisableRelay(), libp2p.DisableMetrics(), libp2p.ConnectionManager(cm),
		// No AutoNAT probing: every peer is reachable at its listen
		// address, and a host's ambient AutoNAT could hold up its Close
		// for ever (seen in a swarm process that never exited).
		libp2p.ForceReachabilityPublic(),
	}
	switch t {
	case TCP:
		opts = append(opts, libp2p.Transport(tcp.NewTCPTransport), libp2p.ListenAddrStrings(fmt.Sprintf("/%s/%s/tcp/0", family, ip)))
	case QUIC:
		opts = append(opts, libp2p.Transport(quic.NewTransport), libp2p.ListenAddrStrings(fmt.Sprintf("/%s/%s/udp/0/quic-v1", family, ip)))
	default:
		return nil, fmt.Errorf("swarm: %s is not a socket transport", t)
	}
	return libp2p.New(opts...)
}
