package certs

import (
	"bytes"
	"crypto/x509"
	"encoding/base64"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestKubeletServingCA: Ensure creates a CA of its own for kubelet serving
// certificates, apart from the server CA, with a 0600 key, keeps it across
// starts and never replaces it by itself; `certs check` lists it.
func TestKubeletServingCA(t *testing.T) {
	o := testOptions(t)
	p := mustEnsure(t, o)
	if want := filepath.Join(o.Dir, "kubelet-serving-ca.crt"); p.KubeletServingCA.Cert != want {
		t.Errorf("kubelet-serving CA at %s, want %s", p.KubeletServingCA.Cert, want)
	}
	ca, key, err := LoadKeyPair(p.KubeletServingCA)
	if err != nil {
		t.Fatal(err)
	}
	if !ca.IsCA || ca.KeyUsage&x509.KeyUsageCertSign == 0 {
		t.Errorf("kubelet-serving CA cannot sign certificates")
	}
	if m, _ := modeOf(p.KubeletServingCA.Key); m != 0o600 {
		t.Errorf("kubelet-serving CA key mode %#o, want 0600", m)
	}
	server := loadCert(t, p.ServerCA.Cert)
	if samePublicKey(server.PublicKey, key.Public()) || server.Subject.CommonName == ca.Subject.CommonName {
		t.Errorf("the kubelet-serving CA is the server CA (%s)", ca.Subject)
	}
	if !slices.ContainsFunc(p.Entries(), func(e Entry) bool { return e.Name == "kubelet-serving-ca" && e.CA == nil }) {
		t.Errorf("Entries() lacks the CA kubelet-serving-ca: %v", p.Entries())
	}

	before := snapshot(t, dataDir(o))
	o.Now = clock(base.Add(30 * 24 * time.Hour))
	mustEnsure(t, o)
	if c := changed(before, snapshot(t, dataDir(o))); len(c) != 0 {
		t.Errorf("second Ensure changed %v", c)
	}

	if err := os.Remove(p.KubeletServingCA.Key); err != nil {
		t.Fatal(err)
	}
	_, err = Ensure(testContext(t), o)
	wantErrContains(t, err, "kubelet-serving CA", p.KubeletServingCA.Key)
}

// bundleCAs returns the subjects of the certificates in the bundle file.
func bundleCAs(t *testing.T, p *PKI) []*x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(p.KubeletServingCABundle)
	if err != nil {
		t.Fatal(err)
	}
	certs, err := parseCerts(b)
	if err != nil {
		t.Fatal(err)
	}
	return certs
}

// signedBy mints a kubelet-like serving certificate from the CA at ca, at now.
func signedBy(t *testing.T, ca KeyPair, now time.Time, validity time.Duration) *x509.Certificate {
	t.Helper()
	caCert, caKey, err := LoadKeyPair(ca)
	if err != nil {
		t.Fatal(err)
	}
	key, _, err := newKey()
	if err != nil {
		t.Fatal(err)
	}
	spec := &leafSpec{name: "kubelet", ca: &caState{cert: caCert, key: caKey}, cn: "system:node:n1", orgs: []string{"system:nodes"},
		ips: []net.IP{net.ParseIP("192.168.1.20")}, usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	cert, _, err := mintLeaf(spec, key.Public(), now, validity)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// verifiesWithBundle reports whether the API server, trusting the bundle,
// accepts cert at now.
func verifiesWithBundle(t *testing.T, p *PKI, cert *x509.Certificate, now time.Time) bool {
	t.Helper()
	pool := x509.NewCertPool()
	for _, c := range bundleCAs(t, p) {
		pool.AddCert(c)
	}
	_, err := cert.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	return err == nil
}

// TestKubeletServingBundle: the API server's kubelet CA bundle holds the
// kubelet-serving CA only on a cluster created with it; on a data dir from
// before it (its server CA is older), also the server CA, until the last
// kubelet serving certificate the server CA can have signed has expired:
// one signing duration after the kubelet-serving CA was created.
func TestKubeletServingBundle(t *testing.T) {
	const upgradeAfter = 200 * 24 * time.Hour
	tests := []struct {
		name string
		// upgrade makes the data dir one from before the kubelet-serving CA.
		upgrade bool
		// replaceServerCA replaces the server CA after the upgrade.
		replaceServerCA bool
		leafValidity    time.Duration
	}{
		{name: "created with it"},
		{name: "a data dir from before it", upgrade: true},
		{name: "a data dir from before it, test lifetimes", upgrade: true, leafValidity: 90 * time.Second},
		{name: "server CA replaced since", upgrade: true, replaceServerCA: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := testOptions(t)
			o.LeafValidity = tt.leafValidity
			p := mustEnsure(t, o)
			now := base
			// A kubelet serving certificate the old controller-manager signed
			// with the server CA just before the upgrade.
			var old *x509.Certificate
			if tt.upgrade {
				now = base.Add(upgradeAfter)
				old = signedBy(t, p.ServerCA, now, SigningDuration(tt.leafValidity))
				for _, f := range []string{p.KubeletServingCA.Cert, p.KubeletServingCA.Key, p.KubeletServingCABundle} {
					if err := os.Remove(f); err != nil {
						t.Fatal(err)
					}
				}
				o.Now = clock(now)
				p = mustEnsure(t, o)
			}
			if tt.replaceServerCA {
				for _, f := range []string{p.ServerCA.Cert, p.ServerCA.Key} {
					if err := os.Remove(f); err != nil {
						t.Fatal(err)
					}
				}
				now = now.Add(time.Hour)
				o.Now = clock(now)
				p = mustEnsure(t, o)
			}
			kubeletCA := loadCert(t, p.KubeletServingCA.Cert)
			serverCA := loadCert(t, p.ServerCA.Cert)
			fresh := signedBy(t, p.KubeletServingCA, now, SigningDuration(tt.leafValidity))
			if !verifiesWithBundle(t, p, fresh, now) {
				t.Errorf("a certificate from the kubelet-serving CA does not verify with the bundle")
			}

			transition := tt.upgrade && !tt.replaceServerCA
			if !transition {
				if got := bundleCAs(t, p); len(got) != 1 || !got[0].Equal(kubeletCA) {
					t.Errorf("bundle holds %d certificates, want the kubelet-serving CA only", len(got))
				}
				if !p.KubeletServerCATrustedUntil.IsZero() {
					t.Errorf("KubeletServerCATrustedUntil = %v, want zero", p.KubeletServerCATrustedUntil)
				}
				if old != nil && verifiesWithBundle(t, p, old, now) {
					t.Errorf("a certificate of the replaced server CA verifies with the bundle")
				}
				return
			}

			got := bundleCAs(t, p)
			if len(got) != 2 || !got[0].Equal(kubeletCA) || !got[1].Equal(serverCA) {
				t.Fatalf("bundle holds %d certificates, want the kubelet-serving CA and the server CA", len(got))
			}
			end := p.KubeletServerCATrustedUntil
			if want := kubeletCA.NotBefore.Add(clockSkew + SigningDuration(tt.leafValidity)); !end.Equal(want) {
				t.Errorf("trusted until %v, want %v", end, want)
			}
			if end.Before(old.NotAfter) {
				t.Errorf("the transition ends at %v, before the old certificate expires at %v", end, old.NotAfter)
			}
			if !verifiesWithBundle(t, p, old, now) {
				t.Errorf("the server CA's kubelet certificate does not verify with the bundle during the transition")
			}

			// A start just before the end keeps the server CA; the first
			// start after it drops it.
			o.Now = clock(end.Add(-time.Second))
			p = mustEnsure(t, o)
			if n := len(bundleCAs(t, p)); n != 2 {
				t.Errorf("a second before the end the bundle holds %d certificates, want 2", n)
			}
			o.Now = clock(end)
			p = mustEnsure(t, o)
			if got := bundleCAs(t, p); len(got) != 1 || !got[0].Equal(kubeletCA) {
				t.Errorf("after the transition the bundle holds %d certificates, want the kubelet-serving CA only", len(got))
			}
			if !p.KubeletServerCATrustedUntil.Equal(end) {
				t.Errorf("after the transition KubeletServerCATrustedUntil = %v, want %v", p.KubeletServerCATrustedUntil, end)
			}
			if verifiesWithBundle(t, p, signedBy(t, p.ServerCA, end, time.Hour), end) {
				t.Errorf("after the transition a certificate from the server CA verifies with the bundle")
			}
		})
	}
}

// TestKubeletServingCANotPublished: nothing Ensure writes for clients names
// the kubelet-serving CA: the kubeconfigs carry the server CA only.
func TestKubeletServingCANotPublished(t *testing.T) {
	o := testOptions(t)
	p := mustEnsure(t, o)
	ca, err := os.ReadFile(p.KubeletServingCA.Cert)
	if err != nil {
		t.Fatal(err)
	}
	der := loadCert(t, p.KubeletServingCA.Cert).Raw
	for _, kc := range []string{p.AdminKubeconfig, p.ControllerManagerKubeconfig, p.SchedulerKubeconfig} {
		b, err := os.ReadFile(kc)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, ca) || bytes.Contains(b, []byte(base64.StdEncoding.EncodeToString(ca))) ||
			bytes.Contains(b, []byte(filepath.Base(p.KubeletServingCA.Cert))) || bytes.Contains(b, der) {
			t.Errorf("%s names the kubelet-serving CA", kc)
		}
	}
}
