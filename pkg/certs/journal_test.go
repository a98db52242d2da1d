package certs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEnsureAfterInterruptedCreate checks that a start accepts what a crash
// in the middle of creating a CA or the service-account key pair leaves (the
// group's journal and some of its files) and creates a matching pair, while
// the same half-present pair without a journal (an operator's mistake) is
// still refused, as TestEnsureErrorsOnExistingPKI checks.
func TestEnsureAfterInterruptedCreate(t *testing.T) {
	pairs := []struct {
		name       string
		first, sec func(*PKI) string // in the order the group writes them
	}{
		{"cluster CA", func(p *PKI) string { return p.ServerCA.Key }, func(p *PKI) string { return p.ServerCA.Cert }},
		{"etcd CA", func(p *PKI) string { return p.EtcdCA.Key }, func(p *PKI) string { return p.EtcdCA.Cert }},
		{"service-account key", func(p *PKI) string { return p.ServiceAccountKey }, func(p *PKI) string { return p.ServiceAccountPub }},
	}
	for _, pair := range pairs {
		for _, written := range []int{0, 1, 2} {
			t.Run(pair.name+"/"+[]string{"journal only", "first file written", "both written"}[written], func(t *testing.T) {
				// A complete PKI elsewhere supplies the bytes the crashed write had.
				donor := mustEnsure(t, testOptions(t))
				o := testOptions(t)
				p := newPKI(o)
				if err := os.MkdirAll(filepath.Dir(p.EtcdCA.Cert), 0o700); err != nil {
					t.Fatal(err)
				}
				files := []string{pair.first(p), pair.sec(p)}
				journal := filepath.Join(filepath.Dir(files[0]), "."+filepath.Base(files[0])+journalSuffix)
				if err := os.WriteFile(journal, []byte(strings.Join(files, "\n")+"\n"), 0o600); err != nil {
					t.Fatal(err)
				}
				from := []string{pair.first(donor), pair.sec(donor)}
				for i := range written {
					b, err := os.ReadFile(from[i])
					if err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(files[i], b, 0o600); err != nil {
						t.Fatal(err)
					}
				}
				got := mustEnsure(t, o)
				if _, err := os.Stat(journal); !os.IsNotExist(err) {
					t.Errorf("journal %s still there after Ensure: %v", journal, err)
				}
				if pair.name != "service-account key" {
					kp := got.ServerCA
					if pair.name == "etcd CA" {
						kp = got.EtcdCA
					}
					if _, _, err := LoadKeyPair(kp); err != nil {
						t.Errorf("%s after recovery: %v", pair.name, err)
					}
				}
				// The recovered PKI is complete and reused as is by the next start.
				before := snapshot(t, dataDir(o))
				mustEnsure(t, o)
				if c := changed(before, snapshot(t, dataDir(o))); len(c) != 0 {
					t.Errorf("second Ensure changed %v", c)
				}
			})
		}
	}
}
