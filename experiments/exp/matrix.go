package exp

import (
	"strings"
	"time"

	"github.com/superpeer-overlay/superpeer/experiments/latency"
)

var nowFunc = time.Now

// matrixOf resolves a matrix spec for vivaldieval, which wants every pair:
// a shipped or file matrix as it is (Missing pairs are skipped by it), or
// a synthetic space of hosts hosts.
func matrixOf(spec string, hosts int, seed int64) (latency.RTTs, string, error) {
	if strings.HasPrefix(spec, "synthetic") {
		return space(spec, hosts, seed)
	}
	m, err := latency.Open(spec)
	if err != nil {
		return nil, "", err
	}
	return m, m.Name, nil
}
