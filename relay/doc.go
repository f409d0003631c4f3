// Package relay makes the superpeers the circuit-relay v2 relays of the
// peers behind NATs: a superpeer runs go-libp2p's relay service while it is
// one (Serve), and a NAT'd client gives go-libp2p's AutoRelay its own
// superpeer, then the other relays it knows nearest first, as its
// candidates (Source) — in place of AutoRelay's random choice among the
// candidates (go-libp2p issue #523, "Select relays based on latency").
//
// Service. Serve follows a superpeer.Selector: the relay starts when the
// role becomes Superpeer and stops (relayv2.Relay.Close) when it becomes
// anything else. It holds at most the attach capacity of reservations, the
// bound that keeps a well-connected superpeer from being flooded (the
// maintainers' concern in #523), its own clients first: an attached client
// is always admitted, another peer (a client of another superpeer taking
// this one as its second relay) only while the other peers it holds and
// its clients leave a slot free. It lifts go-libp2p's per-IP and per-ASN
// bounds (8 and 32) to that capacity so that clients behind one NAT
// address are not refused below it. Stats counts the relay's events with
// a relayv2.MetricsTracer of the service's own: reservations allowed,
// renewed, refused and active, circuits open and relayed. go-libp2p's
// Close forgets the reservations (a client keeps advertising its
// /p2p-circuit address until its renewal fails, most of an hour later)
// and leaves the circuits already relayed running to their limits.
//
// Source. AutoRelay's options go to libp2p.New, before the host, the node
// and the selector exist: NewSource makes the source, Bind gives it the
// host and the selector once they do, and until then it offers nothing.
// AutoRelayOptions are AutoRelay's settings for it: reserve with the first
// candidate at once, two relays, ask the source every 5 s at most, leave a
// relay that refused alone for a minute, not an hour. AutoRelay shuffles
// the candidates it holds, so the source paces its offers — the next only
// once the last is held or WithPace has passed — and the client's own
// superpeer, offered first, is its first relay. A relay the client holds
// that no longer speaks the hop protocol (its superpeer stepped down) is
// disconnected at the source's next call, so that AutoRelay lets it go and
// asks again.
//
// RandomSource is the baseline: AutoRelay's random choice among the peers
// an application knows (the DHT's routing table), under the same settings.
// Held reads the relays a host holds from its /p2p-circuit addresses, and
// Ping measures a path to a peer, relayed or not, and names its relay.
//
// Addresses. AutoRelay builds a client's /p2p-circuit addresses from its
// relays' public addresses only: a relay known by private or loopback
// addresses alone gives a reservation but no address, and Held does not
// list it. The tests give their relays on 127.0.0.1 a public DNS name that
// their hosts resolve to 127.0.0.1.
package relay
