// Package latency loads, checks and generates round-trip-time matrices: the
// ground truth that in-process swarms, the simulator and the Vivaldi
// evaluation take their link latencies from.
//
// A Matrix holds the RTT in milliseconds between every pair of hosts; a pair
// that was never measured is Missing. Peers are mapped onto hosts with
// Placement, which spreads any number of peers over a matrix's hosts and gives
// peers that share a host a small intra-site RTT, so that a swarm of any size
// can run over a real matrix.
//
// The PlanetLab (490 hosts) and Seattle (99 hosts) matrices ship inside the
// package (data/, with their licence and citation) and load with Builtin.
package latency
