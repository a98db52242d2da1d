package certs

import (
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// LeafLifetimeEnv names an environment variable that shortens the lifetime of
// newly issued leaf certificates (a Go duration such as "40s"). It exists for
// tests that watch certificates being renewed while the server runs; do not
// set it in production.
const LeafLifetimeEnv = "EDGEPLANE_TEST_LEAF_LIFETIME"

// minLeafValidity keeps even test certificates usable for a few round trips.
const minLeafValidity = 10 * time.Second

// LeafLifetimeFromEnv returns the lifetime set by LeafLifetimeEnv, or 0 (the
// default of one year) when it is unset.
func LeafLifetimeFromEnv() (time.Duration, error) {
	v := os.Getenv(LeafLifetimeEnv)
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < minLeafValidity {
		return 0, fmt.Errorf("%s=%q: want a duration of at least %v", LeafLifetimeEnv, v, minLeafValidity)
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
