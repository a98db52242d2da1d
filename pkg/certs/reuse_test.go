package certs

import (
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"os"
	"slices"
	"testing"
	"time"
)

func TestEnsureReusesEverything(t *testing.T) {
	o := testOptions(t)
	p1 := mustEnsure(t, o)
	before := snapshot(t, dataDir(o))
	// Equivalent options spelled differently must not change anything either.
	o.ExtraSANs = []string{"EDGE.example.com.", "10.0.0.5", "10.0.0.5"}
	o.Now = clock(base.Add(24 * time.Hour))
	p2 := mustEnsure(t, o)
	if c := changed(before, snapshot(t, dataDir(o))); len(c) != 0 {
		t.Errorf("second Ensure changed %v", c)
	}
	if *p1 != *p2 {
		t.Errorf("PKI differs:\n%+v\n%+v", p1, p2)
	}
}

func TestEnsureReissues(t *testing.T) {
	kubeconfigs := []string{"admin.kubeconfig", "controller-manager.kubeconfig", "scheduler.kubeconfig"}
	tests := []struct {
		name   string
		mutate func(t *testing.T, o *Options, p *PKI)
		want   []string
	}{{
		name:   "new extra SAN",
		mutate: func(_ *testing.T, o *Options, _ *PKI) { o.ExtraSANs = append(o.ExtraSANs, "10.0.0.6") },
		want:   []string{"tls/apiserver.crt"},
	}, {
		name:   "removed extra SAN",
		mutate: func(_ *testing.T, o *Options, _ *PKI) { o.ExtraSANs = o.ExtraSANs[:1] },
		want:   []string{"tls/apiserver.crt"},
	}, {
		name:   "new advertise address",
		mutate: func(_ *testing.T, o *Options, _ *PKI) { o.AdvertiseAddress = net.ParseIP("192.168.1.11") },
		want:   []string{"tls/apiserver.crt"},
	}, {
		name:   "new cluster domain",
		mutate: func(_ *testing.T, o *Options, _ *PKI) { o.ClusterDomain = "edge.internal" },
		want:   []string{"tls/apiserver.crt"},
	}, {
		name:   "new hostname",
		mutate: func(_ *testing.T, o *Options, _ *PKI) { o.Hostname = "node2" },
		want:   []string{"tls/apiserver.crt", "tls/etcd/server.crt"},
	}, {
		name:   "new port",
		mutate: func(_ *testing.T, o *Options, _ *PKI) { o.APIServerPort = 7443 },
		want:   kubeconfigs,
	}, {
		name:   "admin kubeconfig mode",
		mutate: func(_ *testing.T, o *Options, _ *PKI) { o.AdminKubeconfigMode = 0o640 },
		want:   []string{"admin.kubeconfig"},
	}, {
		name:   "leaf key missing",
		mutate: func(t *testing.T, _ *Options, p *PKI) { remove(t, p.Admin.Key) },
		want:   []string{"tls/admin.crt", "tls/admin.key", "admin.kubeconfig"},
	}, {
		name:   "leaf cert missing",
		mutate: func(t *testing.T, _ *Options, p *PKI) { remove(t, p.Scheduler.Cert) },
		want:   []string{"tls/scheduler.crt"},
	}, {
		name:   "kubeconfig missing",
		mutate: func(t *testing.T, _ *Options, p *PKI) { remove(t, p.ControllerManagerKubeconfig) },
		want:   []string{"controller-manager.kubeconfig"},
	}, {
		name:   "service-account public key missing",
		mutate: func(t *testing.T, _ *Options, p *PKI) { remove(t, p.ServiceAccountPub) },
		want:   []string{"tls/sa.pub"},
	}, {
		name: "key readable by others is restricted",
		mutate: func(t *testing.T, _ *Options, p *PKI) {
			if err := os.Chmod(p.EtcdClient.Key, 0o644); err != nil {
				t.Fatal(err)
			}
		},
		want: nil, // back to 0600 without being rewritten; the mode is checked below
	}, {
		name: "leaf signed by a foreign CA",
		mutate: func(t *testing.T, _ *Options, p *PKI) {
			_, key, err := LoadKeyPair(p.ControllerManager)
			if err != nil {
				t.Fatal(err)
			}
			tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "system:kube-controller-manager"},
				NotBefore: base.Add(-time.Hour), NotAfter: base.Add(300 * 24 * time.Hour),
				ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
			der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p.ControllerManager.Cert, encodeCertPEM(der), 0o644); err != nil {
				t.Fatal(err)
			}
		},
		// The component kubeconfigs point at the files and stay as they are.
		want: []string{"tls/controller-manager.crt"},
	}, {
		name: "CA and its leaves removed",
		mutate: func(t *testing.T, _ *Options, p *PKI) {
			remove(t, p.FrontProxyCA.Cert)
			remove(t, p.FrontProxyCA.Key)
		},
		want: []string{"tls/front-proxy-ca.crt", "tls/front-proxy-ca.key", "tls/front-proxy-client.crt"},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := testOptions(t)
			p := mustEnsure(t, o)
			before := snapshot(t, dataDir(o))
			tc.mutate(t, &o, p)
			p2 := mustEnsure(t, o)
			after := snapshot(t, dataDir(o))
			if got := changed(before, after); !slices.Equal(got, sorted(tc.want...)) {
				t.Errorf("changed %v, want %v", got, sorted(tc.want...))
			}
			for _, l := range leafCerts(p2) {
				if err := verifyLeaf(t, l.leaf, l.ca, l.usages, base); err != nil {
					t.Errorf("%s does not verify: %v", l.name, err)
				}
				if _, _, err := LoadKeyPair(l.leaf); err != nil {
					t.Error(err)
				}
			}
			for _, f := range []string{p2.Admin.Key, p2.EtcdClient.Key, p2.ServiceAccountKey} {
				if m, _ := modeOf(f); m != 0o600 {
					t.Errorf("%s has mode %#o", f, m)
				}
			}
			if m, _ := modeOf(p2.AdminKubeconfig); m != o.withDefaultsMust(t).AdminKubeconfigMode {
				t.Errorf("admin kubeconfig mode %#o", m)
			}
			// A third run is a no-op again.
			mustEnsure(t, o)
			if got := changed(after, snapshot(t, dataDir(o))); len(got) != 0 {
				t.Errorf("third Ensure changed %v", got)
			}
		})
	}
}

func (o Options) withDefaultsMust(t *testing.T) Options {
	t.Helper()
	d, err := o.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func remove(t *testing.T, path string) {
	t.Helper()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
}

func TestEnsureRenewsLeaves(t *testing.T) {
	tests := []struct {
		name     string
		after    time.Duration
		renewed  bool
		verifyAt time.Duration
	}{
		{"200 days later: still valid long enough", 200 * 24 * time.Hour, false, 0},
		{"300 days later: less than a third of its life left", 300 * 24 * time.Hour, true, 600 * 24 * time.Hour},
		{"two years later: expired", 2 * 365 * 24 * time.Hour, true, 2*365*24*time.Hour + time.Hour},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := testOptions(t)
			p := mustEnsure(t, o)
			before := snapshot(t, dataDir(o))
			now := base.Add(tc.after)
			o.Now = clock(now)
			mustEnsure(t, o)
			after := snapshot(t, dataDir(o))
			var want []string
			if tc.renewed {
				want = []string{"admin.kubeconfig"}
				for _, n := range []string{"apiserver", "apiserver-kubelet-client", "front-proxy-client", "admin",
					"controller-manager", "scheduler", "etcd/server", "etcd/client"} {
					want = append(want, "tls/"+n+".crt")
				}
			}
			if got := changed(before, after); !slices.Equal(got, sorted(want...)) {
				t.Errorf("changed %v, want %v", got, sorted(want...))
			}
			if !tc.renewed {
				return
			}
			for _, l := range leafCerts(p) {
				if err := verifyLeaf(t, l.leaf, l.ca, l.usages, now.Add(tc.verifyAt-tc.after)); err != nil {
					t.Errorf("%s does not verify after renewal: %v", l.name, err)
				}
				c := loadCert(t, l.leaf.Cert)
				if !c.NotAfter.Equal(now.Add(365 * 24 * time.Hour)) {
					t.Errorf("%s: NotAfter %v", l.name, c.NotAfter)
				}
			}
		})
	}
}

func TestLeafValidityCappedAtCA(t *testing.T) {
	o := testOptions(t)
	p := mustEnsure(t, o)
	ca := loadCert(t, p.ServerCA.Cert)
	// Half a year before the CA expires: leaves are re-issued once, up to
	// the CA's NotAfter, and then not again on every start.
	now := ca.NotAfter.Add(-180 * 24 * time.Hour)
	o.Now = clock(now)
	mustEnsure(t, o)
	if c := loadCert(t, p.APIServerServing.Cert); !c.NotAfter.Equal(ca.NotAfter) {
		t.Errorf("serving NotAfter %v, want the CA's %v", c.NotAfter, ca.NotAfter)
	}
	o.Now = clock(now.Add(100 * 24 * time.Hour))
	before := snapshot(t, dataDir(o))
	mustEnsure(t, o)
	if got := changed(before, snapshot(t, dataDir(o))); len(got) != 0 {
		t.Errorf("Ensure near CA expiry changed %v", got)
	}
}
