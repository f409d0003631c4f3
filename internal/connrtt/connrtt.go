// Package connrtt reads the round-trip time a transport has measured for a
// libp2p connection: the kernel's for TCP (Linux, by the socket's four-tuple
// over sock_diag, as ss -ti does) and quic-go's for QUIC. Both are the
// minimum RTT the transport has seen on the connection, taken when ACKs
// arrive, so a process that is slow to be scheduled does not stretch it
// the way it stretches an exchange timed in the application.
package connrtt

import (
	"net"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"
	"github.com/quic-go/quic-go"
)

// Of is the transport's minimum RTT of c, and whether it has one: false
// for a connection of another transport (relayed, mocknet, WebSocket, …),
// off Linux for TCP, or before its first RTT sample.
func Of(c network.Conn) (time.Duration, bool) {
	var qc *quic.Conn
	if c.As(&qc) {
		d := qc.ConnectionStats().MinRTT
		return d, d > 0
	}
	local, lok := tcpAddr(c.LocalMultiaddr())
	remote, rok := tcpAddr(c.RemoteMultiaddr())
	if !lok || !rok {
		return 0, false
	}
	return tcpMinRTT(local, remote)
}

// tcpAddr is a plain TCP multiaddr's address (/ip4|ip6/…/tcp/…, nothing
// after: a /ws or /p2p-circuit connection is not one TCP socket of ours).
func tcpAddr(a ma.Multiaddr) (*net.TCPAddr, bool) {
	if a == nil || len(a) != 2 {
		return nil, false
	}
	if c := a[1].Code(); c != ma.P_TCP {
		return nil, false
	}
	na, err := manet.ToNetAddr(a)
	if err != nil {
		return nil, false
	}
	t, ok := na.(*net.TCPAddr)
	return t, ok
}
