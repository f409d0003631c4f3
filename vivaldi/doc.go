// Package vivaldi gives every peer a network coordinate whose distance to
// another peer's predicts the RTT between them, without anyone measuring
// every pair.
//
// The model (config.go, client.go, coord.go) is pure Go with no libp2p
// import, shaped like hashicorp/serf's coordinate package: a Client takes
// RTT samples with Update and moves its Coord by the rule of Dabek et al.
// (SIGCOMM 2004: adaptive timestep, height vectors), with Ledlie et al.'s
// (NSDI 2007) latency filter, gravity and neighbour decay, plus two
// additions that measurably help on real matrices (see
// experiments/vivaldieval): a big timestep while a node's error is high, and
// a force scaled by the link's relative length once it has settled. Update
// refuses bad input (NaN or Inf, wrong dimensions, RTTs outside (0, 10 s])
// with named errors and counts it, so no NaN ever reaches a stored
// coordinate: one would spread to every peer that samples us.
//
// A peer may lie about its coordinate (Kaafar et al. 2007; Zage and
// Nita-Rotaru 2007: inflation, deflation, oscillation; Chan-Tin et al.: a
// slow "frog-boiling" drift). By default Update refuses with
// ErrImplausible a claim the triangle inequality rules out against the
// peers it sampled lately (Config.TriangleMargin), and it never trusts a
// claimed error below the floor of Config.RemoteErrorMin; these cost an
// honest embedding nothing measurable. Opt-in, Config.OutlierFactor also
// refuses a sample whose residual is an outlier against the node's recent
// ones (a median test in the spirit of Newton, Seibert et al. 2012): it
// stops deflation liars, which the triangle test lets through, at a cost
// to an honest embedding's p90 error. The Service neither keeps nor shares
// the coordinate of a peer it refused so, and counts the reply as the drop
// "implausible". Figures: experiments/README.md, "coordinate liars".
//
// The protocol (protocol.go, options.go, wire.go, pb/) runs the exchange on
// a libp2p host as /superpeer/vivaldi/1.0.0 (<prefix>/vivaldi/1.0.0 with
// WithProtocolPrefix, the overlay's prefix): the caller sends its
// coordinate, the callee answers with its own, and the caller times the
// exchange as the RTT sample. Frames are varint-length-prefixed protobuf
// capped at 1 KiB (plus MaxPiggyback); a bad frame resets the stream and is counted in
// Service.Drops under a named reason.
//
// A live peer cannot pick its near neighbours by true RTT, as a simulator
// can; it finds them as Pyxida does (Ledlie et al.): a caller asks for a
// few neighbours (want_neighbors), the reply carries them (the callee's
// nearest by measured RTT, and the peers it knows nearest the caller's
// coordinate), and the caller measures the promising ones and keeps the K
// of lowest measured RTT as its near set, which it samples alternately with
// random peers. The set is neighbors.go: pure, with the clock and the
// randomness injected. A malformed neighbour entry is refused and counted
// on its own; the rest of the frame is used. A caller that does not ask
// gets the reply peers always got, so older peers interoperate.
//
// Sampling opens connections, and go-libp2p's connection manager keeps a
// new one through its grace period whatever it was for. With
// WithTidyConns the Service keeps its own share small: it tags its near
// neighbours (NearTag) so that a trim keeps them, takes its random
// samples among the peer source's peers it is connected to, and closes a
// connection it opened only to measure a candidate that stayed out of the
// near set.
package vivaldi
