package exp

import (
	"github.com/superpeer-overlay/superpeer/experiments/sim"
	"github.com/superpeer-overlay/superpeer/repel"
	"github.com/superpeer-overlay/superpeer/vivaldi"
)

// liarTrace is how the tokens that liars hold at the end of one liars run
// came to them: the hand-over that last brought each from an honest peer
// to a liar, by what led to it ("move": the holder's own move decision,
// "site", "survey"), or "mint" for a token a liar minted and no honest peer
// held since.
type liarTrace struct {
	Seed        int64          `json:"seed"`
	Holders     int            `json:"holders"`
	LiarHolders int            `json:"liar_holders"`
	Sources     map[string]int `json:"sources"`
	// Moves counts every hand-over by the kinds of its two ends: "h>h",
	// "h>L", "L>h", "L>L".
	Moves map[string]int `json:"moves"`
	// ToLiars are the hand-overs from an honest holder to a liar: the
	// true RTT between the two and the distance between their
	// coordinates as the honest holder saw them (the token's last place
	// and the liar's claim), ms.
	ToLiars [][2]float64 `json:"to_liars"`
}

// traceLiars runs the liars' goal row of one kind (20% liars, the default
// defence with the outlier test, coordinate check k) on one seed and
// follows every token from holder to holder.
func traceLiars(kind sim.LiarKind, seed int64, k float64) (*liarTrace, error) {
	p := liarsDefaults(k)
	p.C = capacityFor(p.N, p.S)
	rtt, idStrs, err := liarSpace(p, seed)
	if err != nil {
		return nil, err
	}
	index := make(map[string]int, p.N)
	for i, id := range idStrs {
		index[id] = i
	}
	o := liarRun(p, rtt, idStrs, seed, kind, p.GoalFraction, liarSetting{true, true})
	liars := o.Liars
	side := func(i int) string {
		if liars[i] {
			return "L"
		}
		return "h"
	}
	tr := &liarTrace{Seed: seed, Sources: map[string]int{}, Moves: map[string]int{}}
	why := map[[2]uint64]string{} // (token, epoch) of an offer → what led to it
	source := map[uint32]string{} // token → how it last came into liars' hands
	holder := map[uint32]int{}
	place := map[uint32]vivaldi.Coord{} // token → its holder's coordinate as last announced
	o.Watch = func(i int, e repel.Event) {
		key := [2]uint64{uint64(e.Token.ID), e.Token.Epoch}
		switch e.Kind {
		case repel.EventMinted:
			holder[e.Token.ID], place[e.Token.ID] = i, e.Token.Coord
			if liars[i] {
				source[e.Token.ID] = "mint"
			}
		case repel.EventSiteShared:
			why[key] = "site"
		case repel.EventSurveyMoved:
			why[key] = "survey"
		case repel.EventAccepted:
			g, ok := index[e.Token.Giver]
			if !ok {
				return
			}
			w := why[key]
			if w == "" {
				w = "move"
			}
			tr.Moves[side(g)+">"+side(i)]++
			if !liars[g] && liars[i] {
				source[e.Token.ID] = w
				tr.ToLiars = append(tr.ToLiars, [2]float64{rtt.RTT(g, i), 1000 * place[e.Token.ID].DistanceTo(e.Token.Coord)})
			}
			holder[e.Token.ID], place[e.Token.ID] = i, e.Token.Coord
		}
	}
	res, err := sim.SimulateLiars(o)
	if err != nil {
		return nil, err
	}
	tr.Holders, tr.LiarHolders = res.Holders, res.LiarHolders
	final := map[int]bool{}
	for _, h := range res.HolderPeers {
		final[h] = true
	}
	for id, h := range holder {
		if liars[h] && final[h] {
			tr.Sources[source[id]]++
		}
	}
	return tr, nil
}
