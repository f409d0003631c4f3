package relay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/protocol/ping"
	ma "github.com/multiformats/go-multiaddr"
)

// Ping connects to info, allowing a limited (relayed) connection — its
// addresses may be /p2p-circuit addresses through relays — and pings it count times over one
// connection with go-libp2p's ping protocol. It returns each RTT and, when
// the connection the pings took is relayed, the relay's peer ID (from the
// connection's remote address, /…/p2p/RELAY/p2p-circuit). Without
// addresses in info it dials those of the peerstore. On an error it returns
// the RTTs measured before it.
func Ping(ctx context.Context, h host.Host, info peer.AddrInfo, count int) (rtts []time.Duration, via peer.ID, err error) {
	if count < 1 {
		return nil, "", fmt.Errorf("relay: ping %s: count %d, want at least 1", info.ID, count)
	}
	if len(info.Addrs) == 0 && len(h.Peerstore().Addrs(info.ID)) == 0 && h.Network().Connectedness(info.ID) != network.Connected {
		return nil, "", fmt.Errorf("relay: ping %s: no address", info.ID)
	}
	ctx = network.WithAllowLimitedConn(ctx, "relay.Ping")
	if err := h.Connect(ctx, info); err != nil {
		return nil, "", fmt.Errorf("relay: connect %s: %w", info.ID, err)
	}
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := ping.Ping(pctx, h, info.ID)
	for len(rtts) < count {
		var (
			res ping.Result
			ok  bool
		)
		select {
		case res, ok = <-results:
		case <-ctx.Done():
			return rtts, via, fmt.Errorf("relay: ping %s: %w", info.ID, ctx.Err())
		}
		switch {
		case !ok:
			return rtts, via, fmt.Errorf("relay: ping %s: %w", info.ID, errors.Join(ctx.Err(), errors.New("stream ended")))
		case res.Error != nil:
			return rtts, via, fmt.Errorf("relay: ping %s: %w", info.ID, res.Error)
		}
		if len(rtts) == 0 {
			// The ping stream is open now: its connection is the one.
			via = pingVia(h, info.ID)
		}
		rtts = append(rtts, res.RTT)
	}
	return rtts, via, nil
}

// pingVia is the relay of the connection to p that carries an outbound
// ping stream ("" when that connection is direct); without one, of the
// connection a new stream would take — a direct one if there is any.
func pingVia(h host.Host, p peer.ID) peer.ID {
	conns := h.Network().ConnsToPeer(p)
	for _, c := range conns {
		for _, s := range c.GetStreams() {
			if s.Protocol() == ping.ID && s.Stat().Direction == network.DirOutbound {
				return relayOf(c.RemoteMultiaddr())
			}
		}
	}
	var via peer.ID
	for _, c := range conns {
		r := relayOf(c.RemoteMultiaddr())
		if r == "" {
			return ""
		}
		via = r
	}
	return via
}

// relayOf is the relay of a /…/p2p/RELAY/p2p-circuit… address, "" for an
// address that is not relayed or names no relay.
func relayOf(a ma.Multiaddr) peer.ID {
	for i, c := range a {
		if c.Code() != ma.P_CIRCUIT {
			continue
		}
		if i == 0 || a[i-1].Code() != ma.P_P2P {
			return ""
		}
		id, err := peer.IDFromBytes(a[i-1].RawValue())
		if err != nil {
			return ""
		}
		return id
	}
	return ""
}

// relaysOf are the relays of the relayed addresses among addrs,
// deduplicated and sorted.
func relaysOf(addrs []ma.Multiaddr) []peer.ID {
	var out []peer.ID
	for _, a := range addrs {
		if r := relayOf(a); r != "" {
			out = append(out, r)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Held lists the relays this host holds reservations with, as its
// addresses show them: the relays of the /p2p-circuit addresses AutoRelay
// adds to h.Addrs(), deduplicated and sorted. AutoRelay builds those from
// the relay's public addresses only (go-libp2p's cleanupAddressSet), so a
// reservation with a relay known by private or loopback addresses alone is
// held but not listed.
func Held(h host.Host) []peer.ID { return relaysOf(h.Addrs()) }
