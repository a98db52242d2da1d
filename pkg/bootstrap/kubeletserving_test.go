package bootstrap

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"

	"github.com/edgeplane/edgeplane/pkg/certs"
	"github.com/edgeplane/edgeplane/pkg/datastore"
	"github.com/edgeplane/edgeplane/pkg/join"
)

// TestShareKubeletServingCA: servers that share a datastore end up with one
// kubelet-serving CA. On a cluster whose bootstrap data predates the CA,
// each server's certs.Ensure made one of its own: the first to start stores
// its own, the others adopt it (and their bundles name it); on a cluster
// created with it, the bootstrap data gave every server the same one.
func TestShareKubeletServingCA(t *testing.T) {
	for _, tt := range []struct {
		name string
		// sharedCA: the bootstrap data holds the kubelet-serving CA.
		sharedCA bool
	}{
		{name: "bootstrap data from before the kubelet-serving CA"},
		{name: "bootstrap data with it", sharedCA: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			store := startSQLite(t)
			secret, err := join.NewSecret()
			if err != nil {
				t.Fatal(err)
			}
			a := ensureIn(t, ctx, t.TempDir())
			// Server b joins with a's bootstrap data.
			data, err := join.Collect(filepath.Dir(a.Dir))
			if err != nil {
				t.Fatal(err)
			}
			if !tt.sharedCA {
				for _, f := range join.KubeletServingCAFiles {
					delete(data, f)
				}
			}
			bDir := t.TempDir()
			if _, err := data.Apply(bDir); err != nil {
				t.Fatal(err)
			}
			b := ensureIn(t, ctx, bDir)
			if same := sameCA(t, a, b); same != tt.sharedCA {
				t.Fatalf("before sharing, b's kubelet-serving CA is a's: %v, want %v", same, tt.sharedCA)
			}

			for _, step := range []struct {
				name         string
				pki          *certs.PKI
				wantReplaced bool
			}{
				{"a, first", a, false},
				{"b", b, !tt.sharedCA},
				{"a again", a, false},
				{"b again", b, false},
			} {
				replaced, err := shareKubeletServingCA(ctx, store, step.pki, secret)
				if err != nil {
					t.Fatalf("%s: %v", step.name, err)
				}
				if replaced != step.wantReplaced {
					t.Errorf("%s: replaced %v, want %v", step.name, replaced, step.wantReplaced)
				}
			}
			if !sameCA(t, a, b) {
				t.Fatal("after sharing, b's kubelet-serving CA is not a's")
			}
			// b's next Ensure keeps the adopted CA and bundles it.
			b = ensureIn(t, ctx, bDir)
			if !sameCA(t, a, b) {
				t.Fatal("Ensure replaced the adopted kubelet-serving CA")
			}
			caPEM, _ := os.ReadFile(a.KubeletServingCA.Cert)
			bundle, _ := os.ReadFile(b.KubeletServingCABundle)
			if !bytes.HasPrefix(bundle, caPEM) {
				t.Error("b's kubelet CA bundle does not start with the shared kubelet-serving CA")
			}

			other, err := join.NewSecret()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := shareKubeletServingCA(ctx, store, b, other); err == nil {
				t.Error("a server with another cluster's token adopted the stored kubelet-serving CA")
			}
		})
	}
}

func startSQLite(t *testing.T) datastore.Datastore {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ds, err := datastore.New(datastore.Options{Type: datastore.TypeSQLite, DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ds.Stop(context.Background()) })
	if err := ds.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ds.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	return ds
}

func ensureIn(t *testing.T, ctx context.Context, dataDir string) *certs.PKI {
	t.Helper()
	p, err := certs.Ensure(ctx, certs.Options{Dir: filepath.Join(dataDir, "tls"), APIServerPort: 6443})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func sameCA(t *testing.T, a, b *certs.PKI) bool {
	t.Helper()
	for _, f := range []func(*certs.PKI) string{
		func(p *certs.PKI) string { return p.KubeletServingCA.Cert },
		func(p *certs.PKI) string { return p.KubeletServingCA.Key },
	} {
		x, err := os.ReadFile(f(a))
		if err != nil {
			t.Fatal(err)
		}
		y, err := os.ReadFile(f(b))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(x, y) {
			return false
		}
	}
	return true
}
