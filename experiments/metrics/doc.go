// Package metrics turns the state of an experiment into numbers: summary
// statistics, Lo et al.'s four requirements for a superpeer selection, the
// centralised baselines every method is compared against, and the
// superpeer-count formulas of the prefix method.
//
// It is pure: state in, numbers out. It imports no network, no files and no
// clock, and everything random takes a seeded *rand.Rand, so an experiment that
// records its seed can be rerun to the same numbers.
//
// # Requirements (Lo et al. 2005)
//
// Lo, Zhou, Liu, Dumitrescu, Foster and Raman, "Scalable supernode selection
// in peer-to-peer overlay networks" (HOT-P2P 2005), ask four things of a
// superpeer selection; Evaluate measures each:
//
//   - Proximity: clients should be close to their superpeer. ClientRTT
//     summarises the true RTT from each served client to the superpeer it is
//     assigned to.
//   - Dispersion: superpeers should be spread over the network, not bunched.
//     Spread gives the RTT from every client to its nearest superpeer (the
//     k-median cost per client, which a bunched selection makes large), its
//     coefficient of variation (how evenly that coverage falls), and the
//     minimum and mean RTT between pairs of superpeers (two superpeers a few
//     milliseconds apart serve the same clients).
//   - Count: there should be the intended number of superpeers. Count gives
//     the number and share of superpeers and, once a target is set, the ratio
//     to it.
//   - Capacity: no superpeer should serve more clients than it can. Load gives
//     clients per superpeer (max, mean, Gini, max/mean) and Unserved counts
//     clients left without a superpeer.
//
// # Conventions
//
// RTTs come from a latency.RTTs in milliseconds. A Missing entry is a link
// that cannot be used: it is never a client's nearest superpeer, and a client
// assigned over it is counted in UnknownRTT rather than given a made-up
// latency. Pass Matrix.Filled for a matrix with gaps.
//
// Quantiles interpolate linearly between order statistics (Hyndman and Fan's
// type 7, the default of R and NumPy); see Quantile. Gini is the mean absolute
// difference over twice the mean, so equal loads give 0 and one superpeer
// holding all load among n gives (n−1)/n; see Gini.
package metrics
