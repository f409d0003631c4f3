package sim

import (
	"errors"
	randv2 "math/rand/v2"
	"time"

	"github.com/superpeer-overlay/superpeer/experiments/latency"
	"github.com/superpeer-overlay/superpeer/experiments/metrics"
	"github.com/superpeer-overlay/superpeer/repel"
	"github.com/superpeer-overlay/superpeer/superpeer"
	"github.com/superpeer-overlay/superpeer/vivaldi"
)

// SurveyLieScale is the share of its true RTT to each client a survey
// liar reports.
const SurveyLieScale = 0.5

// ReportLiarOptions describe a run of the token method over fixed
// coordinates with liars in what only they can measure: the RTTs of a
// survey report, or the regret of an attach request. The liars' Vivaldi
// coordinates are honest, and they run the token method honestly
// otherwise.
type ReportLiarOptions struct {
	RTT       latency.RTTs
	IDs       []string
	Seed      int64
	Coords    []vivaldi.Coord
	Neighbors [][]int32
	// Liars marks the liars (nil or all false: the clean run).
	Liars []bool
	// Survey: a liar candidate of a survey reports its true RTT to the
	// holder (which the holder measures itself) and to the other holders
	// (a holder within repel.Config.SiteRTT would disqualify it), but
	// SurveyLieScale of its true RTT to each client, to win the token.
	Survey bool
	// Regret: a liar claims to have no other choice (the largest regret)
	// in every attach request, to displace the clients of full holders.
	Regret bool
	// Repel and Capacity as RepelOptions'; Choose is the clients' chooser
	// and the holders' regret bound (repel.AttachConfig.RegretFactor).
	Repel    repel.Config
	Capacity int
	Choose   repel.AttachConfig
}

// ReportLiarResult is the outcome of SimulateReportLiars.
type ReportLiarResult struct {
	Liars int `json:"liars"`
	// Holders at the end and how many are liars.
	Holders     int   `json:"holders"`
	LiarHolders int   `json:"liar_holders"`
	Superpeers  []int `json:"-"`
	Settled     bool  `json:"repel_settled"`
	// Survey moves offered, and offered to liars; reports refused as
	// implausible (repel.EventSurveyRefused), and of those, liars'.
	SurveyOffers       int `json:"survey_offers"`
	SurveyOffersLiars  int `json:"survey_offers_to_liars"`
	SurveyRefused      int `json:"survey_reports_refused"`
	SurveyRefusedLiars int `json:"survey_reports_refused_liars"`
	// ClientRTT is the mean true RTT (ms) of the honest clients (neither
	// liars nor holders) to their holder, LiarClientRTT the liars'
	// (those that are clients); unattached clients are left out.
	ClientRTT         float64 `json:"client_rtt_ms"`
	Clients           int     `json:"honest_clients"`
	Unattached        int     `json:"honest_unattached"`
	LiarClientRTT     float64 `json:"liar_client_rtt_ms"`
	LiarClients       int     `json:"liar_clients"`
	LiarsUnattached   int     `json:"liars_unattached"`
	Displaced         int     `json:"displaced"`
	DisplacedByLiars  int     `json:"displaced_by_liars"`
	RegretsCapped     int     `json:"regrets_capped"`
	AttachRequests    int     `json:"attach_requests"`
	AttachRefusedFull int     `json:"attach_refused_full"`
	// Honest and Liar are each peer's true RTT (ms) to its holder, -1
	// for a holder, an unattached peer, and a liar (Honest) or an honest
	// peer (Liar): to compare the same clients across runs.
	Honest []float64 `json:"-"`
	Liar   []float64 `json:"-"`
}

// SimulateReportLiars runs SimulateRepel over o.Coords with o.Liars lying
// in their survey reports (o.Survey) or attach regrets (o.Regret), and
// scores the honest clients and the liars.
func SimulateReportLiars(o ReportLiarOptions) (*ReportLiarResult, error) {
	n := len(o.IDs)
	var err error
	if o.Liars, err = liarFlags("report liars", o.RTT, n, o.Liars); err != nil {
		return nil, err
	}
	res := &ReportLiarResult{}
	for _, l := range o.Liars {
		if l {
			res.Liars++
		}
	}
	index := make(map[string]int, n)
	for i, id := range o.IDs {
		index[id] = i
	}
	// What the liars know: the survey each holder last sent (its peers in
	// order) and the holder each token was last announced by.
	surveys := map[int][]string{}
	holderOf := map[uint32]string{}
	ro := RepelOptions{RTT: o.RTT, Coords: o.Coords, Neighbors: o.Neighbors, IDs: o.IDs,
		Config: o.Repel, Seed: o.Seed, Attach: AttachSelector, Capacity: o.Capacity,
		Choose: o.Choose, Displace: superpeer.DefaultDisplace}
	ro.Tamper = func(i int, m *repel.Message) {
		switch m.Type {
		case repel.MsgAnnounce:
			holderOf[m.Token.ID] = m.Token.Holder
		case repel.MsgSurvey:
			surveys[i] = m.Survey
		case repel.MsgMove:
			if m.Token.Surveyed {
				res.SurveyOffers++
				if o.Liars[index[m.To]] {
					res.SurveyOffersLiars++
				}
			}
		case repel.MsgSurveyReport:
			ids := surveys[index[m.To]]
			if !o.Survey || !o.Liars[i] || len(m.RTTs) != len(ids) {
				return
			}
			holders := map[string]bool{}
			for _, h := range holderOf {
				holders[h] = true
			}
			lie := append([]float64(nil), m.RTTs...)
			for k := 1; k < len(lie); k++ {
				if lie[k] > 0 && !holders[ids[k]] {
					lie[k] *= SurveyLieScale
				}
			}
			m.RTTs = lie
		}
	}
	ro.Watch = func(i int, e repel.Event) {
		if e.Kind == repel.EventSurveyRefused {
			res.SurveyRefused++
			if j, ok := index[e.Token.Holder]; ok && o.Liars[j] {
				res.SurveyRefusedLiars++
			}
		}
	}
	if o.Regret {
		ro.RegretLiars = o.Liars
	}
	rr, err := SimulateRepel(ro)
	if err != nil {
		return nil, err
	}
	res.Settled = rr.Settled
	res.Holders, res.Superpeers = len(rr.Superpeers), rr.Superpeers
	holder := make([]bool, n)
	for _, h := range rr.Superpeers {
		holder[h] = true
		if o.Liars[h] {
			res.LiarHolders++
		}
	}
	st := rr.Attach
	res.Displaced, res.DisplacedByLiars, res.RegretsCapped = st.Displaced, st.DisplacedByLiars, st.Capped
	res.AttachRequests, res.AttachRefusedFull = st.Requests, st.RefusedFull
	res.Honest, res.Liar = make([]float64, n), make([]float64, n)
	var sumH, sumL float64
	for c, h := range rr.Assignment {
		res.Honest[c], res.Liar[c] = -1, -1
		if holder[c] {
			continue
		}
		if h == metrics.Unassigned || h < 0 {
			if o.Liars[c] {
				res.LiarsUnattached++
			} else {
				res.Unattached++
			}
			continue
		}
		d := o.RTT.RTT(c, h)
		if o.Liars[c] {
			res.Liar[c] = d
			sumL += d
			res.LiarClients++
		} else {
			res.Honest[c] = d
			sumH += d
			res.Clients++
		}
	}
	if res.Clients > 0 {
		res.ClientRTT = sumH / float64(res.Clients)
	}
	if res.LiarClients > 0 {
		res.LiarClientRTT = sumL / float64(res.LiarClients)
	}
	return res, nil
}

// AttachRunOptions describe rounds of the clients' attach step alone
// (AttachSelector) over fixed holders: what regret liars gain from the
// holders' tables, without the token placement that follows the clients.
type AttachRunOptions struct {
	RTT     latency.RTTs
	IDs     []string
	Seed    int64
	Coords  []vivaldi.Coord
	Holders []int
	// Capacity, Displace and Choose as RepelOptions' (Choose zero:
	// repel.DefaultAttachConfig with ProbeEvery 5 × Every).
	Capacity int
	Displace time.Duration
	Choose   repel.AttachConfig
	// Rounds of renewal by every client, Every apart (default 20 and
	// 15 s: five minutes, time for every client to have measured).
	Rounds int
	Every  time.Duration
	// RegretLiars claim to have no other choice in every request.
	RegretLiars []bool
}

// AttachRunResult is the outcome of SimulateAttach.
type AttachRunResult struct {
	Stats AttachStats `json:"attach"`
	// PerClient is each peer's true RTT (ms) to its holder after the
	// last round, -1 for a holder or an unattached peer.
	PerClient []float64 `json:"-"`
}

// SimulateAttach runs o.Rounds of the clients' attach step over the fixed
// holders o.Holders, in a fresh seeded order each round as SimulateRepel
// does, every holder's superpeer.AttachTable bounding regrets as
// o.Choose says.
func SimulateAttach(o AttachRunOptions) (*AttachRunResult, error) {
	n := len(o.IDs)
	if o.RTT == nil || o.RTT.Len() < n || len(o.Coords) != n || len(o.Holders) == 0 {
		return nil, errors.New("sim: attach needs an RTT space and a coordinate for every peer, and holders")
	}
	if o.Rounds <= 0 {
		o.Rounds = 20
	}
	if o.Every <= 0 {
		o.Every = 15 * time.Second
	}
	if o.Choose == (repel.AttachConfig{}) {
		o.Choose = repel.DefaultAttachConfig()
		o.Choose.ProbeEvery = 5 * o.Every
	}
	a, err := newAttacher(o.RTT, o.Coords, o.IDs, o.Capacity, o.Displace, o.Choose)
	if err != nil {
		return nil, err
	}
	a.liars = o.RegretLiars
	order := randv2.New(randv2.NewPCG(uint64(o.Seed), 0xa77ac4))
	for r := 0; r < o.Rounds; r++ {
		a.round(o.Holders, time.Duration(r)*o.Every, order.Perm(n))
	}
	res := &AttachRunResult{Stats: a.statsNow(), PerClient: make([]float64, n)}
	for c, h := range a.assignment(o.Holders) {
		res.PerClient[c] = -1
		if h >= 0 && h != c {
			res.PerClient[c] = o.RTT.RTT(c, h)
		}
	}
	return res, nil
}
