package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

// envPrefix starts the environment variable of every `peer run` flag:
// --vivaldi-interval is SUPERPEER_VIVALDI_INTERVAL.
const envPrefix = "SUPERPEER_"

// envName is the environment variable that sets the flag name.
func envName(name string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// parseFlagsEnv is parseFlags, then applyEnv with the process's
// environment: a container or a cluster can configure the peer by flags,
// by environment variables, or both, the command line winning. Its usage
// text says so.
func parseFlagsEnv(fs *flag.FlagSet, args []string) error {
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage of %s:\n", fs.Name())
		fs.PrintDefaults()
		fmt.Fprintf(fs.Output(), "Every flag may also be set by the environment variable %sNAME, NAME the flag's name in capitals with _ for - (%s=/ip4/…/p2p/ID,/dns4/…/p2p/ID; %s=true); the command line wins, and an empty variable counts as unset.\n",
			envPrefix, envName("bootstrap"), envName("pow2"))
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	return applyEnv(fs, os.LookupEnv)
}

// applyEnv sets each flag of fs that the command line did not set from its
// environment variable (envName), if lookup finds it and it is not empty.
// A repeatable flag takes a comma-separated list, as on the command line.
// A value the flag refuses is a usage error naming the variable. Only the
// flags' own variables are read, so other SUPERPEER_* variables (such as
// the ones Kubernetes makes for a Service of that name) are ignored.
func applyEnv(fs *flag.FlagSet, lookup func(string) (string, bool)) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || given[f.Name] {
			return
		}
		name := envName(f.Name)
		v, ok := lookup(name)
		if !ok || v == "" {
			return
		}
		if serr := fs.Set(f.Name, v); serr != nil {
			err = fmt.Errorf("%w: %s=%q: invalid value for --%s: %v", errUsage, name, v, f.Name, serr)
		}
	})
	return err
}
