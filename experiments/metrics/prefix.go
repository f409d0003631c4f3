package metrics

import "math"

// ExpectedPrefixCount is the expected number of superpeers the prefix method
// elects among n peers with uniformly random IDs when it keeps k bits of
// prefix: one superpeer per prefix that at least one peer's ID falls under,
//
//	E = 2^k · (1 − (1 − 2^−k)^n)
//
// (each of the 2^k prefixes is empty with probability (1 − 2^−k)^n). It is
// about n while n ≪ 2^k, and 2^k once n ≫ 2^k. Written naively the formula
// loses every digit for large k (1 − 2^−k rounds to 1), so it is computed as
// −2^k · expm1(n · log1p(−2^−k)), accurate to a few ulps for any n and k.
// n < 0 or k < 0 gives NaN.
func ExpectedPrefixCount(n, k int) float64 {
	switch {
	case n < 0 || k < 0:
		return math.NaN()
	case n == 0:
		return 0
	case k > 1000:
		// 2^k overflows; the relative error of answering n is below
		// n·2^−k, far under one ulp.
		return float64(n)
	}
	p := math.Ldexp(1, -k)
	return -math.Ldexp(math.Expm1(float64(n)*math.Log1p(-p)), k)
}

// BookPrefixCount is the superpeer count of the prefix scheme as Tanenbaum and
// van Steen state it (Distributed Systems, 3rd ed., §6.4, election in
// large-scale systems): with m-bit IDs (m = 256 for libp2p's SHA-256 key
// space) and the k leftmost bits naming a superpeer's region, the superpeers
// are the nodes responsible for the keys p·2^(m−k), p a k-bit prefix, and
// the book counts about 2^(k−m)·N of them for N nodes:
//
//	B = 2^(k−m) · N
//
// Read literally it is the expected number of N random IDs that land exactly
// on one of the 2^k reserved points, a fraction 2^k/2^m of the ID space. Only
// when N is the size of the whole ID space, N = 2^m (every ID taken), is it
// 2^k, one superpeer per prefix, which is what the scheme intends; for any
// real swarm (N ≪ 2^256) it is vanishingly small, and the count the scheme
// really gets — the node responsible for each reserved point — is
// ExpectedPrefixCount. N is a float64 so that 2^256 fits.
func BookPrefixCount(N float64, k, m int) float64 {
	return math.Ldexp(N, k-m)
}
