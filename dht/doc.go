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
// Embedding. New takes the application's host; Close stops the DHT and our
// handlers and leaves the host to its owner.
package dht
