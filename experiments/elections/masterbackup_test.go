package elections

import "testing"

// At every seed a backup takes over from the paused master with a higher
// epoch and, at the end, is the one master every node names. With the
// fence the storage refuses the old master's write and accepts no stale
// one; without it the stale write is accepted after the new master's:
// the check must see the split brain.
func TestMasterBackup(t *testing.T) {
	for _, a := range Lookup("master-backup") {
		fenced := a.Variant == ""
		for _, n := range []int{4, 5, 8, 16} {
			for seed := int64(1); seed <= 25; seed++ {
				r, v, err := a.Run(n, seed, false)
				if err != nil {
					t.Fatal(err)
				}
				if !v.OneLeader {
					t.Fatalf("%s n=%d seed %d: %s", a.Key(), n, seed, v.Note)
				}
				m := r.LiveLeaders()[0]
				if c := r.Nodes[m].(*mbCandidate); m == mbFirstMaster || c.epoch != 2 {
					t.Fatalf("%s n=%d seed %d: master %d, epoch %d", a.Key(), n, seed, m, c.epoch)
				}
				if old := r.Nodes[mbFirstMaster].(*mbCandidate); old.master || old.holder != m {
					t.Fatalf("%s n=%d seed %d: the old master takes %d for master (itself: %v)", a.Key(), n, seed, old.holder, old.master)
				}
				s := r.Nodes[mbStorageIndex].(*mbStorage)
				switch {
				case fenced && (!v.RightLeader || s.stale > 0 || s.refused == 0 || r.ByKind["FENCED"] == 0):
					t.Fatalf("%s n=%d seed %d: %d stale writes accepted, %d refused: %s", a.Key(), n, seed, s.stale, s.refused, v.Note)
				case !fenced && (v.RightLeader || s.stale == 0 || s.refused > 0 || v.Note == ""):
					t.Fatalf("%s n=%d seed %d: no split brain shown (%d stale writes accepted)", a.Key(), n, seed, s.stale)
				}
				if s.accepted == 0 || s.writer != m {
					t.Fatalf("%s n=%d seed %d: storage's last writer %d, master %d", a.Key(), n, seed, s.writer, m)
				}
			}
		}
	}
}
