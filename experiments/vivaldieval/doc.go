// Package vivaldieval measures the embedding error of the vivaldi model on an
// RTT matrix, beside hashicorp/serf's coordinate package fed exactly the same
// samples in the same order, so the two numbers differ only by the model.
//
// One round: every node, in index order, takes one RTT sample from one peer
// chosen by the schedule (random: any peer; neighbors: one of a fixed random
// set of 32) and feeds it, with the peer's current coordinate, to its model.
// The sample is the matrix entry: the matrices are already per-pair medians,
// so the evaluation measures how well the model embeds the space, not how it
// copes with jitter (Options.Jitter adds that).
package vivaldieval
