package certs

import (
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// LeafLifetimeEnv names a test knob, not a setting: an environment variable
// that shortens the lifetime of newly issued leaf certificates (a Go duration
// such as "40s") and, in the server, makes client-go re-read client
// certificate files process-wide that often. It exists for tests that watch
// certificates being renewed while the server runs. It is gated so that no
// production environment sets it by accident: only test-scale lifetimes,
// from minLeafValidity to maxLeafValidity, are accepted, and any other value
// stops the server with an error (there is no config file key or flag).
const LeafLifetimeEnv = "EDGEPLANE_TEST_LEAF_LIFETIME"

// minLeafValidity keeps even test certificates usable for a few round trips;
// maxLeafValidity keeps the knob a test one: a lifetime anyone would choose
// for a real cluster is refused.
const (
	minLeafValidity = 10 * time.Second
	maxLeafValidity = time.Hour
)

// LeafLifetimeFromEnv returns the lifetime set by the test knob
// LeafLifetimeEnv, or 0 (the default of one year) when it is unset; a value
// outside the test range is an error.
func LeafLifetimeFromEnv() (time.Duration, error) {
	v := os.Getenv(LeafLifetimeEnv)
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < minLeafValidity || d > maxLeafValidity {
		return 0, fmt.Errorf("%s=%q: this is a test knob that shortens certificate lifetimes, accepted only from %v to %v; "+
			"unset it (edgeplane issues one-year certificates and renews them itself)", LeafLifetimeEnv, v, minLeafValidity, maxLeafValidity)
	}
	return d, nil
}

// Layout returns the paths of the PKI of the data dir dataDir (certificates
// under dataDir/tls, kubeconfigs in dataDir) without touching the disk, for
// commands that inspect or rotate the PKI of a server.
func Layout(dataDir string) (*PKI, error) {
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		return nil, fmt.Errorf("tls: cannot resolve %q: %w", dataDir, err)
	}
	return newPKI(Options{Dir: filepath.Join(abs, "tls"), KubeconfigDir: abs}), nil
}
