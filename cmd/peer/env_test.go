package main

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

func TestEnvName(t *testing.T) {
	for flagName, want := range map[string]string{
		"bootstrap":        "SUPERPEER_BOOTSTRAP",
		"vivaldi-interval": "SUPERPEER_VIVALDI_INTERVAL",
		"identity-seed":    "SUPERPEER_IDENTITY_SEED",
	} {
		if got := envName(flagName); got != want {
			t.Errorf("envName(%q) = %q, want %q", flagName, got, want)
		}
	}
}

// envFlags is a flag set shaped like `peer run`'s: a repeatable list, a
// string, a duration, an int and a bool.
func envFlags() (*flag.FlagSet, *listFlag, *string, *time.Duration, *int, *bool) {
	fs := newFlagSet("run", io.Discard)
	var boot listFlag
	fs.Var(&boot, "bootstrap", "")
	httpAddr := fs.String("http", "", "")
	ttl := fs.Duration("ttl", 30*time.Second, "")
	superpeers := fs.Int("superpeers", 16, "")
	pow2 := fs.Bool("pow2", false, "")
	return fs, &boot, httpAddr, ttl, superpeers, pow2
}

func lookupIn(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
}

func TestApplyEnv_SetsFlagsTheCommandLineLeft(t *testing.T) {
	fs, boot, httpAddr, ttl, superpeers, pow2 := envFlags()
	if err := parseFlags(fs, []string{"--superpeers", "3"}); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"SUPERPEER_BOOTSTRAP":  "/dns4/a/tcp/4001/p2p/X, /dns4/b/tcp/4001/p2p/Y",
		"SUPERPEER_HTTP":       "0.0.0.0:8080",
		"SUPERPEER_TTL":        "12s",
		"SUPERPEER_SUPERPEERS": "99", // the command line wins
		"SUPERPEER_POW2":       "true",
		"SUPERPEER_PORT":       "tcp://10.0.0.1:4001", // a Service's variable: no flag, ignored
	}
	if err := applyEnv(fs, lookupIn(env)); err != nil {
		t.Fatal(err)
	}
	if got := boot.String(); got != "/dns4/a/tcp/4001/p2p/X,/dns4/b/tcp/4001/p2p/Y" {
		t.Errorf("bootstrap = %q", got)
	}
	if *httpAddr != "0.0.0.0:8080" || *ttl != 12*time.Second || *superpeers != 3 || !*pow2 {
		t.Errorf("http %q, ttl %v, superpeers %d, pow2 %v", *httpAddr, *ttl, *superpeers, *pow2)
	}
	// A flag set from the environment counts as given (flagSet), as
	// `peer run --capacity` needs.
	if !flagSet(fs, "ttl") || !flagSet(fs, "superpeers") {
		t.Error("flags set from the environment are not seen as given")
	}
}

func TestApplyEnv_EmptyIsUnset(t *testing.T) {
	fs, _, httpAddr, ttl, _, pow2 := envFlags()
	if err := parseFlags(fs, nil); err != nil {
		t.Fatal(err)
	}
	if err := applyEnv(fs, lookupIn(map[string]string{"SUPERPEER_TTL": "", "SUPERPEER_POW2": "", "SUPERPEER_HTTP": ""})); err != nil {
		t.Fatal(err)
	}
	if *httpAddr != "" || *ttl != 30*time.Second || *pow2 || flagSet(fs, "ttl") {
		t.Errorf("empty variables changed the flags: http %q, ttl %v, pow2 %v", *httpAddr, *ttl, *pow2)
	}
}

func TestApplyEnv_BadValueNamesTheVariable(t *testing.T) {
	for name, val := range map[string]string{"SUPERPEER_TTL": "soon", "SUPERPEER_SUPERPEERS": "many", "SUPERPEER_POW2": "perhaps"} {
		fs, _, _, _, _, _ := envFlags()
		if err := parseFlags(fs, nil); err != nil {
			t.Fatal(err)
		}
		err := applyEnv(fs, lookupIn(map[string]string{name: val}))
		if err == nil || !errors.Is(err, errUsage) {
			t.Fatalf("%s=%s: err %v, want a usage error", name, val, err)
		}
		if msg := err.Error(); !strings.Contains(msg, name) || !strings.Contains(msg, val) || strings.Contains(msg, "\n") {
			t.Errorf("%s=%s: error %q does not name the variable and value on one line", name, val, msg)
		}
	}
}

// TestRun_EnvironmentConfiguresPeerRun runs the real `peer run` flag
// parsing: a bad variable ends it with exit 2 and a one-line error naming
// the variable, before any host starts; -h tells of the variables.
func TestRun_EnvironmentConfiguresPeerRun(t *testing.T) {
	t.Setenv("SUPERPEER_VIVALDI_INTERVAL", "often")
	var stderr bytes.Buffer
	if code := run([]string{"run"}, io.Discard, &stderr); code != 2 {
		t.Fatalf("exit %d, want 2; stderr %q", code, stderr.String())
	}
	if got := strings.TrimSpace(stderr.String()); strings.Count(got, "\n") != 0 || !strings.Contains(got, `SUPERPEER_VIVALDI_INTERVAL="often"`) || !strings.Contains(got, "--vivaldi-interval") {
		t.Errorf("stderr %q", got)
	}
	// The command line wins over the environment: the bad variable is not
	// read when the flag is given, and the next check (--refresh) fails.
	stderr.Reset()
	if code := run([]string{"run", "--vivaldi-interval", "1s", "--refresh", "0s"}, io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), "--refresh") {
		t.Errorf("exit %d, stderr %q; want the --refresh error", code, stderr.String())
	}
	stderr.Reset()
	if code := run([]string{"run", "-h"}, io.Discard, &stderr); code != 0 || !strings.Contains(stderr.String(), "SUPERPEER_BOOTSTRAP") {
		t.Errorf("-h: exit %d, usage does not tell of the variables: %q", code, stderr.String())
	}
}
