// Package repel chooses superpeers with repelling tokens (Lo et al. 2005, as
// told by Tanenbaum & van Steen): S tokens live at S peers in Vivaldi
// coordinate space, holders learn of each other by gossip, a holder moves
// its token to a peer where the token's potential is lower, and a peer that
// keeps a token for T_settle is a superpeer.
//
// This file set is the pure model: no libp2p, no goroutines, no clock, no
// I/O, in the style of etcd's raft. A Node is one peer's state machine. The
// caller feeds it time (Tick), received messages (Step), its own coordinate
// (SetCoord) and the peers it believes live (SetPeers); each call returns a
// Ready with the messages to send, the role after the call and the events
// that happened. The libp2p adapters (announcements signed and carried on
// the Vivaldi exchanges, or GossipSub; stream protocols for moves, surveys
// and the holders' direct announcements) and the simulator wrap it.
//
// # Tokens, versions and fencing
//
// A Token is one version of token ID ∈ [0, S): (ID, Epoch, Holder,
// HolderKey, Coord, HeldSince, Moves, Digest, Surveyed). Every move and every re-mint makes a
// version with a higher epoch; versions of one ID are totally ordered by
// (Epoch, HolderKey) (Token.Beats). Every node keeps the freshest version it
// has heard of per ID. A holder that hears of a version beating its own
// drops its token (EventFenced), so two holders of one token always resolve
// to one as soon as either hears the other, and a holder that hears an older
// version elsewhere re-announces at once to hurry that along.
//
// A node holds at most one token: it refuses a move while it holds one
// (reason "holding"), and mints only while it holds none.
//
// # Hand-overs and the guard (Config.Guard)
//
// Every version says how it came to be: a hand-over names its Giver (the
// holder of the version it replaced) and that version's epoch, and carries
// the giver's signature over both and the new version's ID, epoch and
// holder (Token.Cert: the adapter signs and checks it, the model carries
// it); a mint has no giver, and its GiverEpoch is the epoch of the
// version its minter found silent. Without the guard the order alone
// decides, so any peer can take a token by signing a version of it at a
// higher epoch. With it a version replaces the known one at once only if
// it is that version's hand-over, or if the known one is a mint younger
// than DeadAfter (rival mints, and a mint of a token the minter had not
// heard of, resolve by the order). Its holder never takes any other
// fresher version (but the taker's own hand-over of an offer whose answer
// never came): it counts EventUntraced and announces at once with
// Token.Rival, the highest epoch it refused. Other nodes take such a
// version provisionally and keep the one it replaced (for DeadAfter after
// they last heard of it); when its holder announces again with a Rival at
// least that fresh, or its hand-over comes, they go back to it
// (EventReverted; a node that held the rival's token drops it) and refuse
// untraced versions while they hear that holder or those it hands the
// token to. A holder silent for DeadAfter is replaced, as a mint replaces
// it. So a live holder keeps its token unless it hands it over; what the
// guard leaves open is a mint's first DeadAfter, a node that has never
// heard of a token (it takes the first version it hears), and two
// lineages minted on both sides of a partition longer than DeadAfter,
// which stay until one holder leaves (without the guard the higher epoch
// fences the other).
//
// # Messages
//
//   - MsgAnnounce (To "": to everyone): the holder's current version,
//     coordinate and client digest, with its heartbeat Seq one higher
//     than the last. Sent at once on mint, on taking a move and when a
//     stale version is heard; then every MovingAnnounceInterval until the
//     token settles and every AnnounceInterval after. A node takes a copy
//     of a version it knows as news only with a higher Seq, so copies
//     relayed late do not keep a silent holder alive. The selector spreads
//     it signed on the Vivaldi exchanges (Piggyback) or on GossipSub, where its
//     topic validator refuses what the model would.
//   - MsgMove (to the chosen peer): the offered version — higher epoch, the
//     peer as holder, Moves+1.
//   - MsgMoveAck (back to the old holder): the version now held; the old
//     holder drops its own only then (EventMovedAway). A lost ack leaves the
//     old holder holding after MoveTimeout; the new holder's announcement,
//     with its higher epoch, fences it off. A duplicate offer is acked again.
//   - MsgMoveRefuse: reason "holding" (the peer holds a token) or "stale"
//     (the peer knows a fresher version, so the offer comes from a holder
//     that already lost it).
//
// A token is therefore never lost by moving or fencing: the holder of the
// freshest accepted version drops it only on hearing a fresher accepted one.
// Duplicates exist only between an accept and its ack, or until gossip
// carries the fresher version to a stale holder.
//
// # Minting and recovery
//
// Token i is named TokenKey(i) = sha256("repel-token/" + i) in the kad-dht
// key space. A token unheard of for DeadAfter (T_dead) — or, never heard
// of since the node started, for JoinWait (DeadAfter unless set shorter) —
// is minted with the known epoch + 1 by the XOR-closest peer to its name
// among the peers the node believes live and that hold no token; the k-th
// closest tries DeadAfter after the (k−1)-th in case the closer ones are
// gone too. Nodes that disagree on the live set may
// both mint; fencing keeps one. The live Selector ranks on its
// routing-table peers near the name and on lookups of the name (made once
// the token has been silent for three quarters of T_dead, or half of
// JoinWait, by a peer with no nearer routing-table peer — a connected one,
// once the token has been heard of), and lets the first in line mint only on a lookup answered
// since the token went silent: connections come and go, and a peer whose
// nearer neighbour had just been disconnected otherwise minted a token
// that neighbour held.
//
// # A fraction of the network (Config.Fraction)
//
// With a Fraction the count S follows f·n: every node holds a census
// (internal/census) of the value (S, version) and of the holders' reports.
// A settled holder's announcements carry its value and its report — itself
// and its attached clients, for a 1/S share — in Token.Count; every node
// takes a fresher value from any message and merges every report it hears
// (a token's new holder replaces its old one's report). A settled holder
// proposes round(f·n̂) at the next version when f·n̂ has left the band
// around S on two ticks, three in four tokens have reported under the
// current value (f·n̂ then the median of their estimates and the
// proposer's own), and the value is older than JoinWait + SettleAfter +
// 2·AnnounceInterval (a minted token's time to settle and gather clients).
// A node that takes a larger S adds tokens it has never heard of, which
// the XOR-closest peers to their names mint after JoinWait as ever; one
// that takes a smaller S forgets the tokens from S on, and their holders
// drop them (EventRetired): one token at a time per unit of S, the highest
// IDs first, the others staying where they are. An announcement of a
// retired token under an older value is ignored, not refused.
//
// # Force and potential
//
// A holder reconsiders its token's place every MoveInterval (jittered over
// [½, 1½]× so that two holders do not keep deciding on stale views of each
// other). It scores the candidates it knows — peers with coordinates that
// hold no token: from SetPeers (Vivaldi neighbours, attached clients) and
// from the other tokens' digests — by the token's potential there, and offers the token to the best if the
// drop beats MinGain (SettledMinGain once settled) times the token's own
// share of the potential. Two models (Config.Model):
//
//   - Repulsion, Lo et al.'s: potential Σ_j φ(d(x, x_j)) over the other
//     tokens, force 1/d^p along unit(x − x_j) (p = RepelPower, default 2:
//     φ = 1/d). Run to rest it pushes the tokens to the rim of the
//     coordinate cloud: on PlanetLab the mean client RTT is several times
//     a greedy k-median's and worse than random superpeers'.
//   - Attract, ours and the default: potential = mean over the known
//     clients c of min(d(c, x), d(c, nearest other token)) + λ·Σ_j φ(d(x,
//     x_j)). The first term is the k-median cost of the clients with this
//     token at x — it attracts the token toward the clients it would serve
//     and away from those another token serves better. The repulsion term
//     is optional (λ = 0 by default: on PlanetLab any λ that matters pulled
//     tokens apart from their clients). With a capacity (Config.Capacity,
//     the attach protocol's C; the selector sets it) the client term is a
//     capacitated assignment instead: each client's cost without the token
//     is its place when the other tokens take at most C each (regret
//     order), and the token serves the C that gain most by it, so that a
//     crowd larger than one superpeer can serve draws a second token and
//     no token sits in a crowd it would have to turn away.
//
// The clients Attract knows are the node's peers (SetPeers), its attached
// clients marked Peer.Attached, and every other token's client digest: each
// announcement carries up to DigestSize of the holder's attached clients,
// picked by a greedy k-median of their coordinates and weighted by the
// clients nearest each, so every holder sees where all the clients are, in
// outline, and can move toward a crowd that another token serves from afar
// (digest points are also move candidates). For this the attach protocol should let clients attach to
// holders (LiveTokens) before they settle, and the adapter should mark them
// Attached; without digests a holder knows only its neighbours and its own
// clients, and on PlanetLab lands further from the k-median.
//
// In each model the system potential (Repulsion: Σ_{i<j} φ(d_ij); Attract:
// the clients' mean distance to their nearest token plus λ·Σ φ) changes by exactly
// the moving token's change, so with one shared view every move lowers it
// by a positive amount and moves stop: a distributed local search. Holders'
// views differ in practice (own samples of peers, drifting coordinates), so
// CoolingMoves doubles the gain a token needs every so many moves on its
// count, and only rest (CoolingRest per move) brings the count down, which
// bounds the moves anyway. ForceThreshold adds the
// gate of Lo et al. on |F| (Force) before any candidate is scored.
//
// # Measurements (Config.ProbeTTL)
//
// Coordinates predict RTTs; a holder also measures some. While it holds a
// token it asks (Ready.Probes; the adapter answers with Measured — the
// selector with one Vivaldi exchange, the simulator with the true RTT) for
// the RTT to every other live holder and to each of its attached clients,
// again once a measurement is ProbeTTL old. Two uses:
//
//   - Its digest points carry the mean measured RTT of the clients they
//     stand for (Sample.RTT). Another holder's field takes that, in place
//     of the coordinates' prediction, as those clients' distance to the
//     token that serves them: a crowd that the coordinates put far from
//     its superpeer but that measures near it does not draw a second
//     token, and one that measures far does.
//   - Two holders measured within SiteRTT of each other are at one site,
//     whatever their coordinates say (on PlanetLab Vivaldi puts some pairs
//     of hosts of one site far apart, and tokens settled on both). The
//     holder whose version loses the fencing order (Beats) sees the other
//     token at its own place and moves for any gain worth MinGain,
//     cooling aside (EventSiteShared); the other stays.
//   - A client whose coordinate puts it much farther from the holder than
//     the holder measured it (Config.CoordCheck: by more than a factor
//     1 + CoordCheck and CoordFloor) is left out of
//     where the token goes while it does — not a client of the potential,
//     a point of the digest nor a candidate to move to or survey — and
//     still served (EventCoordMisfit, once until it fits again), unless
//     most of the holder's measured clients misfit (then the holder's own
//     coordinate is taken to be at fault). With the check on, the holder
//     also measures whichever peer it is about to offer the token to
//     (Ready.Probes; the move waits for the answer) and passes over one
//     that misfits. It is off by default (CoordCheck 0): against
//     peers that lie together about their coordinates, drifting off to one
//     side (frog-boiling), it kept honest clients nearer their holders but
//     did not keep the tokens from the liars (experiments/README.md,
//     `attacks`).
//
// These make the potentials the holders descend differ from
// the system potential's (which predicts every distance); cooling still bounds
// the moves.
//
// # Surveys (Config.SurveyInterval)
//
// The coordinates bring a token near its clients; measurements pick the
// peer. SurveyInterval after settling, a holder sends MsgSurvey to the
// SurveyCandidates attached clients whose predicted summed distance to its
// other clients is lowest, listing itself, up to SurveyClients of its
// clients it has measured and (with SiteRTT) the other holders. A candidate
// that knows the sender as the token's live holder measures each
// (Ready.Probes; a measurement it already has counts) and answers
// MsgSurveyReport with the RTTs in the survey's order; it declines with an
// empty report a survey from a peer it does not know as the holder, one
// that comes while it measures, one from a holder it measured for within
// SurveyInterval/4, and all with surveys off. When every candidate has
// answered (or SurveyTimeout + MoveTimeout has passed) the holder compares
// each candidate's sum with its own measurements over the clients both
// measured (at least nine in ten) and, if one is better by SurveyGain (its
// mean by SurveyFloor) and measured no other holder within SiteRTT,
// offers it the token with Token.Surveyed set: the new holder takes it
// settled, a superpeer at once (EventSurveyMoved). Only a candidate
// measures its RTTs, and one that shrinks them would win the token, so
// the holder first refuses (EventSurveyRefused) a report that claims less
// than it can check (Config.SurveyCheck): an RTT to the holder below the
// holder's own measurement of the candidate, RTTs to the other candidates
// below theirs to it, a sum over the clients below what the triangle
// inequality allows from the holder's own RTTs. Otherwise it keeps the place
// (EventSurveyKept, Surveyed) and waits twice as long before the next,
// up to 16 × SurveyInterval. The moves are the k-medoids' swap step over
// measured costs, restricted to a cluster, each lowering its clients'
// summed RTT by SurveyGain. A move changes the clients the next survey
// weighs, so a token that a survey brought needs SurveyGain doubled for
// every CoolingMoves moves on its count, as the coordinates' moves cool,
// and a chain of survey moves stops. Settled tokens keep their coordinate moves
// (SettledMinGain): a survey weighs only the holder's own clients, and it
// is the capacitated potential that sends a second token to a crowd one
// cannot hold. In the simulator on PlanetLab, surveys brought the mean
// client RTT closer to a greedy k-median's over the true RTTs.
//
// With RegionSurveys every other survey (after one of the clients kept the
// place) is a region survey: the holder lists the points of the other
// tokens' digests that their holders measured, worst served first (weight
// × RTT), and asks the first SurveyCandidates of them to measure their
// RTTs to all of them. A candidate's saving is Σ weight × max(0, the
// point's RTT now − the candidate's RTT to it); the holder's loss is what
// it and its attached clients would add going to the nearest other holder
// (the coordinates' prediction against its own measurement, its own RTT
// 0; why it counts itself: experiments/README.md, `repel`). With a Capacity
// both sides respect it: the clients go to the nearest other holder with
// room (C less the weights of its digest), a client no holder has room
// for counting as unserved, and a candidate saves for at most C clients,
// those that gain most; without that, under a capacity well below twice
// an even split the region moves went on for good. If the best net
// saving is at least SurveyGain of the summed RTTs of both sides and
// SurveyFloor a client, the token moves there unsettled (EventRegionMoved)
// and its new holder settles and surveys its place as any. This is the
// k-medoids' swap across regions, on measurements: on PlanetLab Vivaldi
// misplaces some far regions enough that the coordinates' potential puts
// every place in them above the holder's own, and the tokens left them
// served from afar (experiments/README.md, `repel-cooling`). A place
// counts as surveyed once both kinds kept it.
//
// # Measurements
//
// What the method gives, in the simulator and in live swarms, and how its
// defaults were chosen, is in experiments/README.md (`repel`,
// `repel-coords`, the live repel sections, and "How the defaults were
// chosen" for the figures behind this doc's claims); the test that embeds the
// PlanetLab matrix and runs the nodes to rest on virtual time is
// TestPlanetLab (REPEL_PLANETLAB=1 go test ./repel/ -run TestPlanetLab -v).
package repel
