package certs

import (
	"bytes"
	"context"
	"os"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
)

func TestRotate(t *testing.T) {
	tests := []struct {
		name    string
		names   []string
		want    []string
		wantErr string
	}{
		{name: "every leaf", want: []string{"apiserver", "apiserver-kubelet-client", "front-proxy-client",
			"etcd-server", "etcd-client", "admin", "controller-manager", "scheduler"}},
		{name: "one service", names: []string{"etcd-server"}, want: []string{"etcd-server"}},
		{name: "admin rewrites its kubeconfig", names: []string{"admin"}, want: []string{"admin"}},
		{name: "unknown name", names: []string{"kubelet"}, wantErr: `no certificate named "kubelet"`},
		{name: "a CA is not a leaf", names: []string{"server-ca"}, wantErr: `no certificate named "server-ca"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := testOptions(t)
			p := mustEnsure(t, o)
			before := map[string]CertInfo{}
			for _, c := range Inspect(p) {
				before[c.Name] = c
			}
			later := base.Add(30 * 24 * time.Hour)
			done, err := Rotate(testContext(t), p, RotateOptions{Names: tc.names, Now: clock(later)})
			if tc.wantErr != "" {
				wantErrContains(t, err, tc.wantErr)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(done, tc.want) {
				t.Fatalf("rotated %v, want %v", done, tc.want)
			}
			for _, c := range Inspect(p) {
				old := before[c.Name]
				rotated := slices.Contains(tc.want, c.Name)
				if got := c.NotAfter.Equal(later.Add(leafValidity)); got != rotated {
					t.Errorf("%s: NotAfter %s, rotated=%v", c.Name, c.NotAfter, rotated)
				}
				if c.Subject != old.Subject || c.SANs() != old.SANs() || c.Issuer != old.Issuer {
					t.Errorf("%s: subject/SANs/issuer changed: %+v -> %+v", c.Name, old, c)
				}
			}
			// Keys are kept, the pair still matches; the next Ensure reuses everything.
			for _, l := range leafCerts(p) {
				if _, _, err := LoadKeyPair(l.leaf); err != nil {
					t.Error(err)
				}
			}
			snap := snapshot(t, dataDir(o))
			o.Now = clock(later)
			mustEnsure(t, o)
			if c := changed(snap, snapshot(t, dataDir(o))); len(c) != 0 {
				t.Errorf("Ensure after Rotate changed %v", c)
			}
			cfg, err := clientcmd.LoadFromFile(p.AdminKubeconfig)
			if err != nil {
				t.Fatal(err)
			}
			certPEM := readFileT(t, p.Admin.Cert)
			if !bytes.Equal(cfg.AuthInfos["admin"].ClientCertificateData, certPEM) {
				t.Error("admin kubeconfig does not embed the current admin certificate")
			}
		})
	}
}

func TestShortLeafValidity(t *testing.T) {
	o := testOptions(t)
	o.LeafValidity = 30 * time.Second
	p := mustEnsure(t, o)
	c := loadCert(t, p.APIServerServing.Cert)
	if !c.NotBefore.Equal(base.Add(-3*time.Second)) || !c.NotAfter.Equal(base.Add(30*time.Second)) {
		t.Fatalf("validity %s..%s, want base-3s..base+30s", c.NotBefore, c.NotAfter)
	}
	// A third of 33 s left: renewed 22 s after NotBefore, at base+19s.
	if got := RenewalTime(c); !got.Equal(base.Add(19 * time.Second)) {
		t.Fatalf("RenewalTime %s, want base+19s", got)
	}
	for _, tc := range []struct {
		after   time.Duration
		renewed bool
	}{{18 * time.Second, false}, {19 * time.Second, true}} {
		o.Now = clock(base.Add(tc.after))
		_, issued, err := ensure(testContext(t), o)
		if err != nil {
			t.Fatal(err)
		}
		if (len(issued) == 8) != tc.renewed {
			t.Errorf("after %v issued %v, want renewed=%v", tc.after, issued, tc.renewed)
		}
	}
	o.LeafValidity = time.Second
	if _, err := Ensure(testContext(t), o); err == nil {
		t.Error("a 1 s lifetime was accepted")
	}
}

func TestRenewer(t *testing.T) {
	o := testOptions(t)
	o.LeafValidity = time.Hour
	var now atomic.Pointer[time.Time]
	setNow := func(t time.Time) { now.Store(&t) }
	setNow(base)
	o.Now = func() time.Time { return *now.Load() }
	p := mustEnsure(t, o)
	first := loadCert(t, p.Admin.Cert)

	issued := make(chan []string, 10)
	r := NewRenewer(o, 10*time.Millisecond, func(_ context.Context, names []string) { issued <- names })
	ctx := testContext(t)
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := r.Stop(ctx); err != nil {
			t.Error(err)
		}
		if err := r.Stop(ctx); err != nil { // idempotent
			t.Error(err)
		}
	}()
	setNow(base.Add(45 * time.Minute)) // less than a third of 65 min left
	select {
	case names := <-issued:
		if len(names) != 8 {
			t.Errorf("renewed %v, want all 8 leaves", names)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no renewal")
	}
	if c := loadCert(t, p.Admin.Cert); !c.NotAfter.After(first.NotAfter) {
		t.Errorf("admin NotAfter %s not after %s", c.NotAfter, first.NotAfter)
	}
}

func TestInspect(t *testing.T) {
	o := testOptions(t)
	p := mustEnsure(t, o)
	remove(t, p.Scheduler.Cert)
	infos := Inspect(p)
	if len(infos) != 13 {
		t.Fatalf("%d entries, want 13", len(infos))
	}
	for _, c := range infos {
		switch {
		case c.Name == "scheduler":
			if c.Err == nil {
				t.Error("missing scheduler certificate not reported")
			}
		case c.Err != nil:
			t.Errorf("%s: %v", c.Name, c.Err)
		case c.CA == nil && !c.RenewAt.IsZero():
			t.Errorf("CA %s has a renewal time", c.Name)
		case c.CA != nil && !c.RenewAt.Before(c.NotAfter):
			t.Errorf("%s renews at %s, not before expiry %s", c.Name, c.RenewAt, c.NotAfter)
		}
	}
	if got := infos[5]; got.Name != "apiserver" || got.Issuer == "" || !bytes.Contains([]byte(got.SANs()), []byte("kubernetes.default.svc.cluster.local")) {
		t.Errorf("apiserver entry %+v", got)
	}
}

func readFileT(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
