package repel

// Hooks of the package's tests into the model.

// ID is the peer this node runs for.
func (n *Node) ID() string { return n.id }

// Tokens returns the freshest version the node knows of each token ID
// (known is false for IDs never heard of).
func (n *Node) Tokens() (toks []Token, known []bool) {
	toks = make([]Token, len(n.tokens))
	known = make([]bool, len(n.tokens))
	for i, e := range n.tokens {
		toks[i], known[i] = copyToken(e.tok), e.known
	}
	return toks, known
}
