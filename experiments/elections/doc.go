// Package elections holds the classic leader elections — Bully, the
// token-less ring, LCR, Hirschberg–Sinclair, echo with extinction,
// TimeSlice, Itai–Rodeh, Vasudevan et al.'s ad hoc election, ZooKeeper's
// FastLeaderElection and master–backup with fencing — as research models
// beside superpeer selection, on the simulator's event loop (sim.Loop):
// virtual time, one-way delays of half a latency space's RTT, seeded.
//
// # Pure state machines
//
// Each algorithm is a Node: a state machine with no clock, network or
// randomness of its own. The runner (Run) feeds it its wake-up (Start),
// the messages that reach it (Receive), its timers (Timeout) and, on
// graphs that change, its links coming and going (LinkChanged); the node
// answers each step by filling an Out with the messages to send and the
// timers to set. A node's randomness is the *rand.Rand of its Config,
// seeded from the run's seed and its index, so a run is a pure function
// of its Scenario.
//
// # The world around the nodes
//
// The runner owns what the failure models need: crash-stop (a crashed node
// drops everything sent to it and its timers never fire), recovery (a fresh
// node, no state kept, started again), pauses (a paused node's inputs wait
// and reach it, in order, when it resumes: a stop-the-world garbage
// collection or a suspended VM) and links going down and up. Links are
// FIFO: a link's delay is fixed, and the loop runs events at equal times in
// the order they were scheduled.
//
// After every step the runner asks the node whom it takes for leader; a
// run records when all live nodes first agreed on one (Result.Agreed), the
// messages sent by then and in all, and, if asked, a trace of every send
// and delivery (Result.Trace) for sequence charts.
//
// # Checking a run
//
// Every Algorithm has a Check that says whether the end state is right
// under its failure model: one leader and the expected one (the highest
// live ID for Bully and the ring elections, the lowest for TimeSlice, the
// most capable node per component for Vasudevan et al., the highest
// (epoch, zxid, sid) of a quorum for FastLeaderElection, no write of a
// stale master accepted for master–backup with fencing).
package elections
