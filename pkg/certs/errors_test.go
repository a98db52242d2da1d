package certs

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/testing/testenv"
)

func TestEnsureErrorsOnExistingPKI(t *testing.T) {
	swap := func(t *testing.T, a, b string) {
		t.Helper()
		x, err := os.ReadFile(a)
		if err != nil {
			t.Fatal(err)
		}
		y, err := os.ReadFile(b)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(a, y, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(b, x, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	replaceWithDir := func(t *testing.T, path string) {
		t.Helper()
		remove(t, path)
		if err := os.Mkdir(path, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	write := func(t *testing.T, path, data string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name string
		// unprivileged: runs as testenv.UnprivilegedUser when the tests run
		// as root, who reads and writes regardless of file modes.
		unprivileged bool
		mutate       func(t *testing.T, o *Options, p *PKI)
		want         func(p *PKI) []string
	}{{
		name:   "leaf key unreadable (a directory in its place)",
		mutate: func(t *testing.T, _ *Options, p *PKI) { replaceWithDir(t, p.Admin.Key) },
		want:   func(p *PKI) []string { return []string{"cannot read " + p.Admin.Key, "is a directory"} },
	}, {
		name:   "CA cert unreadable (a directory in its place)",
		mutate: func(t *testing.T, _ *Options, p *PKI) { replaceWithDir(t, p.EtcdCA.Cert) },
		want:   func(p *PKI) []string { return []string{"cannot read " + p.EtcdCA.Cert} },
	}, {
		name:         "leaf key unreadable (mode 000)",
		unprivileged: true,
		mutate: func(t *testing.T, _ *Options, p *PKI) {
			if err := os.Chmod(p.Scheduler.Key, 0); err != nil {
				t.Fatal(err)
			}
		},
		want: func(p *PKI) []string { return []string{"cannot read " + p.Scheduler.Key, "permission denied"} },
	}, {
		name:   "leaf cert without PEM",
		mutate: func(t *testing.T, _ *Options, p *PKI) { write(t, p.APIServerServing.Cert, "not a certificate\n") },
		want:   func(p *PKI) []string { return []string{p.APIServerServing.Cert, "no PEM CERTIFICATE"} },
	}, {
		name: "CA cert with a corrupt PEM body",
		mutate: func(t *testing.T, _ *Options, p *PKI) {
			write(t, p.ServerCA.Cert, "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
		},
		want: func(p *PKI) []string { return []string{p.ServerCA.Cert, "unparseable certificate"} },
	}, {
		name:   "garbage leaf key",
		mutate: func(t *testing.T, _ *Options, p *PKI) { write(t, p.EtcdClient.Key, "garbage") },
		want:   func(p *PKI) []string { return []string{p.EtcdClient.Key, "not a valid PEM private key"} },
	}, {
		name:   "swapped leaf keys",
		mutate: func(t *testing.T, _ *Options, p *PKI) { swap(t, p.Admin.Key, p.Scheduler.Key) },
		want: func(p *PKI) []string {
			return []string{"tls: " + p.Admin.Key + " does not match " + p.Admin.Cert + ": remove both to have them re-created, or restore the matching pair"}
		},
	}, {
		name:   "swapped CA keys",
		mutate: func(t *testing.T, _ *Options, p *PKI) { swap(t, p.ServerCA.Key, p.ClientCA.Key) },
		want:   func(p *PKI) []string { return []string{p.ServerCA.Key + " does not match " + p.ServerCA.Cert} },
	}, {
		name:   "CA key missing",
		mutate: func(t *testing.T, _ *Options, p *PKI) { remove(t, p.ClientCA.Key) },
		want:   func(p *PKI) []string { return []string{"client CA", p.ClientCA.Cert, p.ClientCA.Key, "does not"} },
	}, {
		name:   "CA cert missing",
		mutate: func(t *testing.T, _ *Options, p *PKI) { remove(t, p.FrontProxyCA.Cert) },
		want:   func(p *PKI) []string { return []string{"front-proxy CA", p.FrontProxyCA.Cert, p.FrontProxyCA.Key} },
	}, {
		name: "leaf cert where a CA belongs",
		mutate: func(t *testing.T, _ *Options, p *PKI) {
			swap(t, p.EtcdCA.Cert, p.EtcdClient.Cert)
			swap(t, p.EtcdCA.Key, p.EtcdClient.Key)
		},
		want: func(p *PKI) []string { return []string{p.EtcdCA.Cert, "is not a CA certificate"} },
	}, {
		name:   "service-account public key does not match",
		mutate: func(t *testing.T, _ *Options, p *PKI) { swapPub(t, p) },
		want:   func(p *PKI) []string { return []string{p.ServiceAccountPub + " does not match " + p.ServiceAccountKey} },
	}, {
		name:   "service-account private key missing",
		mutate: func(t *testing.T, _ *Options, p *PKI) { remove(t, p.ServiceAccountKey) },
		want:   func(p *PKI) []string { return []string{p.ServiceAccountPub, p.ServiceAccountKey} },
	}, {
		name:   "clock in 1970, before the CA's NotBefore",
		mutate: func(_ *testing.T, o *Options, _ *PKI) { o.Now = clock(time.Unix(5, 0)) },
		want: func(p *PKI) []string {
			return []string{"tls: system clock reads 1970-01-01T00:00:05Z, before the cluster CA's NotBefore 2026-03-01T11:55:00Z",
				p.ServerCA.Cert, "set the clock (NTP, or an RTC) and start again"}
		},
	}, {
		name:   "clock went back an hour",
		mutate: func(_ *testing.T, o *Options, _ *PKI) { o.Now = clock(base.Add(-time.Hour)) },
		want:   func(*PKI) []string { return []string{"before the cluster CA's NotBefore", "set the clock"} },
	}, {
		name:   "CA expired",
		mutate: func(_ *testing.T, o *Options, _ *PKI) { o.Now = clock(base.AddDate(11, 0, 0)) },
		want:   func(p *PKI) []string { return []string{"cluster CA", p.ServerCA.Cert, "expired at"} },
	}, {
		name:   "invalid --tls-san",
		mutate: func(_ *testing.T, o *Options, _ *PKI) { o.ExtraSANs = []string{"https://edge.example.com"} },
		want: func(*PKI) []string {
			return []string{`--tls-san "https://edge.example.com"`, "neither an IP address nor a valid DNS name"}
		},
	}, {
		name:   "kubeconfig unreadable",
		mutate: func(t *testing.T, _ *Options, p *PKI) { replaceWithDir(t, p.SchedulerKubeconfig) },
		want:   func(p *PKI) []string { return []string{"cannot read " + p.SchedulerKubeconfig} },
	}, {
		name:         "tls directory not writable",
		unprivileged: true,
		mutate: func(t *testing.T, o *Options, p *PKI) {
			remove(t, p.Admin.Cert)
			if err := os.Chmod(o.Dir, 0o500); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = os.Chmod(o.Dir, 0o700) })
		},
		want: func(p *PKI) []string { return []string{"cannot write to directory " + p.Dir, "permission denied"} },
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.unprivileged && testenv.AsUnprivileged(t) {
				return
			}
			o := testOptions(t)
			p := mustEnsure(t, o)
			tc.mutate(t, &o, p)
			before := snapshot(t, dataDir(o))
			_, err := Ensure(testContext(t), o)
			wantErrContains(t, err, tc.want(p)...)
			if got := changed(before, snapshot(t, dataDir(o))); len(got) != 0 {
				t.Errorf("failed Ensure changed %v", got)
			}
		})
	}
}

// swapPub writes another key's public half as sa.pub.
func swapPub(t *testing.T, p *PKI) {
	t.Helper()
	_, key, err := LoadKeyPair(p.Admin)
	if err != nil {
		t.Fatal(err)
	}
	b, err := encodePublicKeyPEM(key.Public())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p.ServiceAccountPub, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestEnsureErrorsOnFreshDir(t *testing.T) {
	tests := []struct {
		name         string
		unprivileged bool // see TestEnsureErrorsOnExistingPKI
		mutate       func(t *testing.T, o *Options)
		want         func(o Options) []string
	}{{
		name:   "clock in 1970 on first start",
		mutate: func(_ *testing.T, o *Options) { o.Now = clock(time.Unix(5, 0)) },
		want: func(Options) []string {
			return []string{"tls: system clock reads 1970-01-01T00:00:05Z, before 2025-01-01T00:00:00Z", "cluster CA",
				"set the clock (NTP, or an RTC) and start again"}
		},
	}, {
		name: "tls directory is a file",
		mutate: func(t *testing.T, o *Options) {
			if err := os.WriteFile(o.Dir, []byte("keep me"), 0o644); err != nil {
				t.Fatal(err)
			}
		},
		want: func(o Options) []string { return []string{o.Dir, "is not a directory"} },
	}, {
		name: "data directory is a file",
		mutate: func(t *testing.T, o *Options) {
			parent := filepath.Join(filepath.Dir(o.Dir), "data")
			if err := os.WriteFile(parent, []byte("keep me"), 0o644); err != nil {
				t.Fatal(err)
			}
			o.Dir = filepath.Join(parent, "tls")
		},
		want: func(o Options) []string { return []string{"directory " + o.Dir, "not a directory"} },
	}, {
		name:         "data directory not writable",
		unprivileged: true,
		mutate: func(t *testing.T, o *Options) {
			if err := os.Chmod(filepath.Dir(o.Dir), 0o500); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = os.Chmod(filepath.Dir(o.Dir), 0o700) })
		},
		want: func(o Options) []string { return []string{"cannot create directory " + o.Dir, "permission denied"} },
	}, {
		name:   "bad port",
		mutate: func(_ *testing.T, o *Options) { o.APIServerPort = 0 },
		want:   func(Options) []string { return []string{"API server port 0"} },
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.unprivileged && testenv.AsUnprivileged(t) {
				return
			}
			o := testOptions(t)
			tc.mutate(t, &o)
			root := filepath.Dir(o.Dir)
			before := snapshot(t, root)
			_, err := Ensure(testContext(t), o)
			wantErrContains(t, err, tc.want(o)...)
			if got := changed(before, snapshot(t, root)); len(got) != 0 {
				t.Errorf("failed Ensure changed %v", got)
			}
		})
	}
}

// TestLeafLifetimeFromEnvGate keeps the test knob a test one: only
// test-scale lifetimes are accepted, everything else is refused by name.
func TestLeafLifetimeFromEnvGate(t *testing.T) {
	for _, tc := range []struct {
		env     string
		want    time.Duration
		wantErr bool
	}{
		{env: "", want: 0},
		{env: "40s", want: 40 * time.Second},
		{env: "1h", want: time.Hour},
		{env: "9s", wantErr: true},
		{env: "61m", wantErr: true},
		{env: "8760h", wantErr: true},
		{env: "forty", wantErr: true},
	} {
		t.Run(tc.env, func(t *testing.T) {
			t.Setenv(LeafLifetimeEnv, tc.env)
			got, err := LeafLifetimeFromEnv()
			if tc.wantErr {
				wantErrContains(t, err, LeafLifetimeEnv, "test knob", "unset it")
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("LeafLifetimeFromEnv() = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}
