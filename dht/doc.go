// Package dht runs a Kademlia DHT node on any libp2p host: go-libp2p-kad-dht
// in server mode under our own protocol prefix (never the public network),
// optionally GossipSub, plus a raw-key lookup that the selection methods need.
//
// Keys. A peer's key is kad-dht's: SHA-256 of the peer ID bytes, m = 256
// bits, XOR distance. kad-dht hashes every key it is asked to look up, so its
// FIND_NODE cannot reach a point chosen inside the hashed space (the prefix
// method's superpeer key key(p) AND mask, say). Closest therefore runs the
// same iterative Kademlia lookup over kad-dht's own routing tables with a
// small protocol of ours, /superpeer/kad/closest/1.0.0, whose answer is a
// peer's RoutingTable().NearestPeers(target). LookupName uses kad-dht's own
// GetClosestPeers for names hashed into the space.
//
// Protocols. Every protocol ID of the overlay derives from one prefix,
// /superpeer unless ProtocolPrefix says otherwise (Node.ProtocolPrefix):
// kad-dht's <prefix>/kad/1.0.0, the raw-key lookup's
// <prefix>/kad/closest/1.0.0, and those of the components built on the node
// (superpeer's attach protocol, repel's protocols and GossipSub topic; a
// vivaldi.Service, which takes only a host, gets the prefix with
// vivaldi.WithProtocolPrefix). Overlays under different prefixes share a
// host without seeing each other.
//
// Embedding. New takes the application's host, and with WithKad and
// WithPubSub the kad-dht and the pubsub router the application runs already;
// Close stops our handlers and what the node built, and leaves the host and
// what the application gave to their owner.
package dht
