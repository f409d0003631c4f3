package repel

import (
	"context"
	"time"

	lpnet "github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/superpeer-overlay/superpeer/repel/pb"
)

// Survey traffic, as counted in Stats.
const (
	statSurveySent  = "survey_frames_sent"
	statSurveyBytes = "survey_bytes"
	statSurveyRecv  = "survey_frames_received"
	statSurveyLost  = "survey_streams_lost" // a stream that failed before its frame
)

// handleSurvey reads one survey frame (a holder's SURVEY, or a candidate's
// REPORT) and hands it to the loop. A frame that does not decode resets the
// stream and is counted; the peer carries on.
func (s *Selector) handleSurvey(st lpnet.Stream) {
	defer st.Close()
	_ = st.SetDeadline(time.Now().Add(s.streamTimeout()))
	from := st.Conn().RemotePeer()
	var f pb.SurveyFrame
	if !s.readIncoming(st, maxSurveyFrame, &f, statSurveyLost, "survey") {
		return
	}
	m, reason, err := decodeSurvey(&f, from, s.node.ID())
	if err != nil {
		s.drops.Add(reason, 1)
		log.Debugw("repel: bad survey frame", "from", from, "reason", reason, "err", err)
		_ = st.Reset()
		return
	}
	s.stats.Add(statSurveyRecv, 1)
	ctx, cancel := context.WithTimeout(s.ctx, s.streamTimeout())
	defer cancel()
	s.post(ctx, input{msg: m})
}

// sendSurvey sends one survey frame to m.To on a stream of its own. On
// failure it says nothing: the holder's survey goes on without that
// candidate, a candidate's report is missed and the holder decides without
// it.
func (s *Selector) sendSurvey(m Message) {
	s.sendFrame(peer.ID(m.To), s.ids.survey, EncodeSurvey(m), statSurveyLost, statSurveySent, statSurveyBytes)
}
