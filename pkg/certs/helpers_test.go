package certs

import (
	"bytes"
	"context"
	"crypto/x509"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"
)

// base is the fixed "now" of the tests.
var base = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func clock(t time.Time) func() time.Time { return func() time.Time { return t } }

func testOptions(t *testing.T) Options {
	t.Helper()
	root := t.TempDir()
	_, svc, err := net.ParseCIDR("10.43.0.0/16")
	if err != nil {
		t.Fatal(err)
	}
	return Options{
		Dir:              filepath.Join(root, "tls"),
		KubeconfigDir:    root,
		Hostname:         "node1",
		ExtraSANs:        []string{"10.0.0.5", "edge.example.com"},
		AdvertiseAddress: net.ParseIP("192.168.1.10"),
		ServiceCIDR:      svc,
		ClusterDomain:    "cluster.local",
		APIServerPort:    6443,
		Now:              clock(base),
	}
}

func testContext(t *testing.T) context.Context {
	_, ctx := ktesting.NewTestContext(t)
	return ctx
}

func mustEnsure(t *testing.T, o Options) *PKI {
	t.Helper()
	p, err := Ensure(testContext(t), o)
	if err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	return p
}

func loadCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := parseCertPEM(path, b)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

type fileSnap struct {
	data []byte
	mod  time.Time
	mode fs.FileMode
	info fs.FileInfo
}

// snapshot records every regular file under root (the data dir).
func snapshot(t *testing.T, root string) map[string]fileSnap {
	t.Helper()
	s := map[string]fileSnap{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		fi, err := os.Stat(path)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil { // an unreadable file the test made so
			b = []byte("unreadable: " + err.Error())
		}
		rel, _ := filepath.Rel(root, path)
		s[rel] = fileSnap{data: b, mod: fi.ModTime(), mode: fi.Mode(), info: fi}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// changed lists files (relative to the data dir) that were added, removed,
// rewritten (content, mtime or inode) or re-moded between a and b.
func changed(a, b map[string]fileSnap) []string {
	var out []string
	for p, x := range a {
		y, ok := b[p]
		if !ok || !bytes.Equal(x.data, y.data) || !x.mod.Equal(y.mod) || x.mode != y.mode || !os.SameFile(x.info, y.info) {
			out = append(out, p)
		}
	}
	for p := range b {
		if _, ok := a[p]; !ok {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

func sorted(s ...string) []string {
	s = append([]string(nil), s...)
	sort.Strings(s)
	return s
}

func dataDir(o Options) string { return filepath.Dir(o.Dir) }

// leafCerts maps each leaf to the CA that must verify it and its usages.
func leafCerts(p *PKI) []struct {
	name   string
	leaf   KeyPair
	ca     KeyPair
	usages []x509.ExtKeyUsage
} {
	server := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	client := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	return []struct {
		name   string
		leaf   KeyPair
		ca     KeyPair
		usages []x509.ExtKeyUsage
	}{
		{"apiserver", p.APIServerServing, p.ServerCA, server},
		{"apiserver-kubelet-client", p.APIServerKubeletClient, p.ClientCA, client},
		{"front-proxy-client", p.FrontProxyClient, p.FrontProxyCA, client},
		{"etcd-server", p.EtcdServer, p.EtcdCA, server},
		{"etcd-server-as-client", p.EtcdServer, p.EtcdCA, client},
		{"etcd-client", p.EtcdClient, p.EtcdCA, client},
		{"admin", p.Admin, p.ClientCA, client},
		{"controller-manager", p.ControllerManager, p.ClientCA, client},
		{"scheduler", p.Scheduler, p.ClientCA, client},
	}
}

func verifyLeaf(t *testing.T, leaf, ca KeyPair, usages []x509.ExtKeyUsage, now time.Time) error {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AddCert(loadCert(t, ca.Cert))
	_, err := loadCert(t, leaf.Cert).Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now, KeyUsages: usages})
	return err
}

func wantErrContains(t *testing.T, err error, subs ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("expected an error containing %q, got nil", subs)
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("error is not a single line: %q", err)
	}
	for _, s := range subs {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not contain %q", err, s)
		}
	}
}
