package repel

import (
	"context"
	"time"

	lpnet "github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-msgio/pbio"
	"google.golang.org/protobuf/proto"

	"github.com/superpeer-overlay/superpeer/repel/pb"
)

// Survey traffic, as counted in Stats.
const (
	StatSurveySent  = "survey_frames_sent"
	StatSurveyBytes = "survey_bytes"
	StatSurveyRecv  = "survey_frames_received"
	StatSurveyLost  = "survey_streams_lost" // a stream that failed before its frame
)

// handleSurvey reads one survey frame (a holder's SURVEY, or a candidate's
// REPORT) and hands it to the loop. A frame that does not decode resets the
// stream and is counted; the peer carries on.
func (s *Selector) handleSurvey(st lpnet.Stream) {
	defer st.Close()
	_ = st.SetDeadline(time.Now().Add(s.streamTimeout()))
	from := st.Conn().RemotePeer()
	var f pb.SurveyFrame
	if !s.readIncoming(st, MaxSurveyFrame, &f, StatSurveyLost, "survey") {
		return
	}
	m, reason, err := DecodeSurvey(&f, from, s.node.ID())
	if err != nil {
		s.drops.add(reason, 1)
		log.Debugw("repel: bad survey frame", "from", from, "reason", reason, "err", err)
		_ = st.Reset()
		return
	}
	s.stats.add(StatSurveyRecv, 1)
	ctx, cancel := context.WithTimeout(s.ctx, s.streamTimeout())
	defer cancel()
	s.post(ctx, input{msg: m})
}

// sendSurvey sends one survey frame to m.To on a stream of its own. On
// failure it says nothing: the holder's survey goes on without that
// candidate, a candidate's report is missed and the holder decides without
// it.
func (s *Selector) sendSurvey(m Message) {
	ctx, cancel := context.WithTimeout(s.ctx, s.streamTimeout())
	defer cancel()
	st, err := s.node.Host().NewStream(ctx, peer.ID(m.To), SurveyProtocol)
	if err != nil {
		s.stats.add(StatSurveyLost, 1)
		return
	}
	defer context.AfterFunc(ctx, func() { _ = st.Reset() })()
	_ = st.SetDeadline(time.Now().Add(s.streamTimeout()))
	f := EncodeSurvey(m)
	if err := pbio.NewDelimitedWriter(st).WriteMsg(f); err != nil {
		s.drops.add(DropWrite, 1)
		_ = st.Reset()
		return
	}
	s.stats.add(StatSurveySent, 1)
	s.stats.add(StatSurveyBytes, uint64(proto.Size(f)))
	_ = st.Close()
}
