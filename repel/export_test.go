package repel

// Hooks of the package's tests into the model and the selector.

import (
	"fmt"

	"github.com/superpeer-overlay/superpeer/repel/pb"
)

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

// WithSwitch sets how much nearer (by measured RTT where the client has
// one, predicted otherwise) another holder must be before an attached
// client moves to it (default 1.1: 10% nearer; at least 1).
// AttachConfig.Switch.
func WithSwitch(f float64) Option {
	return func(o *selectorOptions) error {
		if !(f >= 1) {
			return fmt.Errorf("%w: WithSwitch(%v): must be ≥ 1", ErrOptions, f)
		}
		o.Switch = f
		return nil
	}
}

// sigKey names what verifyToken checks of st: the signed bytes (the token
// without its digest, holder, giver and certificate included) and the
// signature (lpKey). Two frames with one key verify alike.
func sigKey(st *pb.SignedToken) (verKey, error) {
	b, err := signedBytes(st.GetToken())
	if err != nil {
		return verKey{}, err
	}
	return lpKey(b, st.GetSignature()), nil
}
