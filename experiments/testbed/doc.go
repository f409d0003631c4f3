// Package testbed runs real peers in Linux network namespaces on this
// machine, with every pair's one-way delay half the latency matrix's RTT:
// the plumbing behind `peer testbed`.
//
// A bed is N namespaces on one bridge in the root namespace, each with a
// veth and an address in a /16 of 10.0.0.0/8 not used on the machine; the
// bridge itself has the subnet's last address, from which the test bed
// reads every peer's /status. Everything it makes is named with
// Prefix ("sptb-") and a run ID, so that Cleanup can find leftovers.
//
// The delays are made by one of two shapers:
//
//   - netem: each namespace's egress has an HTB root with one class and a
//     netem qdisc per destination, and u32 filters on the destination
//     address (PlanNetem). A partition sends the other half's addresses to
//     a class whose netem drops everything.
//   - tun: for kernels without sch_netem (sch_netem is a module many
//     minimal kernels leave out). Every namespace routes the subnet through
//     a router namespace whose policy routing hands each packet to a TUN
//     device; the test bed reads it, holds it for the pair's one-way delay
//     (DelayLine, a heap ordered by due time, FIFO per pair) and writes it
//     back, and the router forwards it to its destination. A partition is
//     a drop in the delay line.
//
// Peers can sit behind a masquerading NAT (Config.NAT). A NAT'd peer's
// namespace keeps its bridge veth, address and shaping and becomes its
// home router; the peer runs in an inner namespace (PeerNamespace, named
// with "-n") at NATInnerAddr, 192.168.0.2 on the same private /24 behind
// every NAT, on a veth to the router. The router's nftables rules
// (NATRuleset) masquerade what the peer sends, so the others and the delay
// line see it as the router's address; forward the status port to the
// peer, so /status is read at every peer's address alike; and silently
// drop whatever else comes in unasked, as a home router does (a dial to a
// NAT'd peer times out). A cut or a partition takes the router with it.
//
// The planning — names, addresses, delays, the tc batches, partitions, and
// the convergence checks over the peers' /status — is pure and tested
// without root; the rest runs `ip`, `tc` and for NATs `nft` (exec, no
// cgo) and a few system calls to open the TUN device inside the router
// namespace.
package testbed
