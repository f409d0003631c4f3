package superpeer

import "github.com/superpeer-overlay/superpeer/internal/counters"

// ReportRole sets where the role metric (superpeer_selector_role, with
// WithRegisterer) reads the peer's role from. By default it is
// the role SetRole gives, which is the selector's own for the prefix
// method; a selector whose attach role differs from its role sets it (a
// repel holder serves clients before its token settles, while its role is
// still client).
func (a *Attach) ReportRole(role func() Role) { a.reportRole.Store(&role) }

// The attach protocol's metric families (WithRegisterer), in the
// order report emits them.
var attachFamilies = []counters.Family{
	{Name: "superpeer_selector_role", Help: "1 for the peer's current role (unknown, client or superpeer), 0 for the others; summed over the peers registered, the number of peers in each role.", Kind: counters.Gauge, Label: "role"},
	{Name: "superpeer_attach_clients", Help: "Clients this peer serves now.", Kind: counters.Gauge},
	{Name: "superpeer_attach_capacity", Help: "The most clients this peer serves as a superpeer (0: unbounded).", Kind: counters.Gauge},
	{Name: "superpeer_attach_requests_total", Help: "Attach requests and renewals this peer decided, by result: accepted, full (refused at capacity) or not_superpeer (refused, not a superpeer).", Kind: counters.Counter, Label: "result"},
	{Name: "superpeer_attach_displaced_total", Help: "Clients this superpeer dropped for a newcomer that loses more without it (WithDisplace).", Kind: counters.Counter},
	{Name: "superpeer_attach_requests_sent_total", Help: "Attach requests, renewals and leaves this peer sent as a client.", Kind: counters.Counter},
	{Name: "superpeer_attach_drops_total", Help: "Frames of the attach protocol refused, by reason.", Kind: counters.Counter, Label: "reason"},
	{Name: "superpeer_attach_notices_total", Help: "Notices that a superpeer dropped a client for another: sent (as the superpeer) or heard (as the client, from its own superpeer).", Kind: counters.Counter, Label: "dir"},
}

// report emits the protocol's metrics (attachFamilies).
func (a *Attach) report(emit counters.Emit) {
	var role Role
	if f := a.reportRole.Load(); f != nil {
		role = (*f)()
	} else {
		role, _ = (*a.role.Load())()
	}
	for _, r := range []Role{Unknown, Client, Superpeer} {
		v := 0.0
		if r == role {
			v = 1
		}
		emit(0, r.String(), v)
	}
	emit(1, "", float64(a.Load()))
	emit(2, "", float64(a.opts.Capacity))
	emit(3, "accepted", float64(a.Stats.Accepted.Load()))
	emit(3, "full", float64(a.Stats.RefusedFull.Load()))
	emit(3, "not_superpeer", float64(a.Stats.RefusedNotSuperpeer.Load()))
	emit(4, "", float64(a.Stats.Displaced.Load()))
	emit(5, "", float64(a.Stats.Sent.Load()))
	counters.EmitAll(emit, 6, a.drops.Snapshot(),
		dropAttachDecode, dropAttachCoord, dropAttachAnswer, dropAttachHint, dropAttachStatus, dropAttachWrite, dropAttachLost, dropAttachRate)
	emit(7, "sent", float64(a.Stats.Notified.Load()))
	emit(7, "heard", float64(a.Stats.Heard.Load()))
}
