// Package sim is an event-driven simulator of the pure cores — the prefix
// method's superpeer.PrefixCore with a superpeer.AttachTable per superpeer,
// the Vivaldi model of package vivaldi and the token model of package repel
// — on virtual time, with no libp2p, so
// that experiments can run far past what live hosts fit in memory (the
// prefix method at 10^6 peers, Vivaldi and repel at 10^5).
//
// # Time and messages
//
// Loop is a priority queue of events ordered by (virtual time, sequence
// number): two events at the same instant run in the order they were
// scheduled, so a run is a pure function of its seed. A message from peer i
// to peer j is an event RTT(i, j)/2 later, the one-way delay of the latency
// space (Net.Send). Nothing runs in parallel inside a loop; the only
// parallel step is deriving peer identities, which is per-peer and so
// deterministic.
//
// # Same code as the live peers
//
// Peers are the real models: vivaldi.Client instances updated with the
// coordinates that travel in request and reply messages, repel.Node state
// machines fed Tick and Step with their own messages, superpeer.PrefixCore
// fed its lookups' and attach requests' answers, and superpeer.AttachTable
// answering attach requests for both methods. Peer identities are the live swarm's
// (Identity reproduces experiments/swarm's seeded Ed25519 keys), so on the
// same seed the simulator and a swarm have the same peer IDs and keys and
// the prefix method picks the same superpeers.
//
// # Simplifications (each a documented choice, not an accident)
//
//   - Prefix: no latency space; every message takes a fixed hop and a
//     lookup a few, answered with the XOR-closest peer to the key (a
//     converged DHT's exact lookup, as the swarm checks it is); an attach
//     request is answered by the superpeer's AttachTable; the core's timers
//     (rechecks, renewals, backoff) run on the loop.
//   - Vivaldi: coordinates are sampled in exchanges (request carries the
//     caller's coordinate, reply the callee's as it was when the request
//     arrived, RTT sample = the matrix RTT), as vivaldi.Service does.
//   - Repel gossip reaches every peer, each after RTT(holder, peer)/2. Only
//     the peers whose token tables matter run a repel.Node: the minters
//     (the M XOR-closest peers to each token's name) and every peer that has
//     been offered a token. The others would only record announcements;
//     their table is materialised when they are first offered a token, by
//     replaying the freshest announcement of every token to them. Every
//     ViewEvery the clients, one after another in a seeded order, run the
//     live selector's attach step with its repel.Chooser (AttachSelector):
//     they measure the holders the chooser asks for — the true RTT of the
//     latency space, where a live client makes a Vivaldi exchange — and ask
//     holders in the chooser's order until one with room (Capacity)
//     accepts; holders learn their attached clients then. AttachPredicted,
//     the earlier rule (predicted-nearest holder, no capacity), is kept for
//     the experiments whose published figures used it.
package sim
