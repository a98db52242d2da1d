package e2e

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
)

// TestDay2Operations runs one server per datastore the way an operator
// would: certificate checks and the expiry metric, secrets encrypted at rest
// and key rotation, the audit log, scheduled and on-demand snapshots, and a
// restore that brings back exactly the snapshot's objects.
func TestDay2Operations(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the real server")
	}
	parallel(t, 55*time.Second)
	for _, ds := range datastoreCases {
		t.Run(ds, func(t *testing.T) {
			dir := t.TempDir()
			audit := filepath.Join(t.TempDir(), "audit.log")
			args := []string{"--datastore", ds, "--audit-log-path", audit, "--snapshot-schedule", "@every 2s", "--snapshot-retention", "2"}
			s := startServer(t, dir, args...)
			secret := "s3cret-" + rand.String(16)
			plain := "visible-" + rand.String(16)

			t.Run("secret values are encrypted at rest", func(t *testing.T) {
				ctx := context.Background()
				if _, err := s.client.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{
					ObjectMeta: metav1.ObjectMeta{Name: "db-password"},
					Data:       map[string][]byte{"password": []byte(secret)},
				}, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
				if _, err := s.client.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
					ObjectMeta: metav1.ObjectMeta{Name: "before-snapshot"},
					Data:       map[string]string{"k": plain},
				}, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
				// The ConfigMap's value shows the files are the right ones to search.
				eventually(t, 30*time.Second, "the ConfigMap value in the datastore files", func(context.Context) (bool, error) {
					return len(filesContaining(t, filepath.Join(dir, "db"), plain)) > 0, nil
				})
				if files := filesContaining(t, filepath.Join(dir, "db"), secret); len(files) > 0 {
					t.Fatalf("the secret value is stored in plain bytes in %v", files)
				}
				mode := fileMode(t, filepath.Join(dir, "tls", "encryption-config.yaml"))
				if mode != 0o600 {
					t.Errorf("encryption config mode %#o, want 0600", mode)
				}
				out := cli(t, 0, "secrets-encrypt", "status", "--data-dir", dir)
				wantText(t, out, "Encryption: on (secretbox)")
				wantText(t, out, "loaded")
				if regexp.MustCompile(`(?m)^\s+unencrypted: `).MatchString(out) {
					t.Errorf("status reports unencrypted secrets:\n%s", out)
				}
			})

			t.Run("certs check", func(t *testing.T) {
				out := cli(t, 0, "certs", "check", "--data-dir", dir)
				for _, name := range []string{"server-ca", "kubelet-serving-ca", "etcd-ca", "apiserver", "etcd-server", "admin", "controller-manager", "scheduler"} {
					if !regexp.MustCompile(`(?m)^` + name + `\s+CN=`).MatchString(out) {
						t.Errorf("no line for %s:\n%s", name, out)
					}
				}
				wantText(t, out, "All 13 certificates are valid for more than 30d")
				wantText(t, out, "kubernetes.default.svc.cluster.local") // SANs
				// Leaves live a year, CAs ten: a 400-day horizon flags the leaves only.
				out = cli(t, 1, "certs", "check", "--data-dir", dir, "--warn-within", "400d")
				wantText(t, out, "8 expire within 400d: apiserver, apiserver-kubelet-client")
				if strings.Contains(out, "server-ca,") {
					t.Errorf("a CA is reported as expiring:\n%s", out)
				}
			})

			t.Run("certificate expiry metric", func(t *testing.T) {
				body, err := s.client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				for name, days := range map[string]float64{"apiserver": 365, "etcd-client": 365, "server-ca": 3650} {
					v := metricValue(t, string(body), `edgeplane_certificate_expiration_seconds{name="`+name+`"}`)
					if got := v / 86400; got < days-2 || got > days+1 {
						t.Errorf("%s expires in %.1f days by the metric, want about %v", name, got, days)
					}
				}
			})

			t.Run("audit log", func(t *testing.T) {
				eventually(t, 30*time.Second, "the Secret's creation in the audit log", func(context.Context) (bool, error) {
					b, err := os.ReadFile(audit)
					return err == nil && regexp.MustCompile(`"verb":"create".*"resource":"secrets","namespace":"default","name":"db-password"`).Match(b), err
				})
				b, _ := os.ReadFile(audit)
				if bytes.Contains(b, []byte(secret)) {
					t.Error("the audit log holds the secret value")
				}
				if bytes.Contains(b, []byte(`"requestURI":"/readyz`)) {
					t.Error("the default policy logs health checks")
				}
			})

			t.Run("scheduled snapshots appear and are pruned", func(t *testing.T) {
				snaps := filepath.Join(dir, "snapshots")
				var first string
				// The scheduler saves, then prunes: between the two a third
				// snapshot exists for a moment, never a fourth.
				eventually(t, 30*time.Second, "two scheduled snapshots", func(context.Context) (bool, error) {
					names := scheduled(t, snaps)
					if len(names) > 3 {
						t.Fatalf("retention 2, found %v", names)
					}
					if len(names) == 2 {
						first = names[0]
					}
					return len(names) == 2, nil
				})
				eventually(t, 30*time.Second, "the oldest snapshot pruned", func(context.Context) (bool, error) {
					names := scheduled(t, snaps)
					if len(names) > 3 {
						t.Fatalf("retention 2, found %v", names)
					}
					return len(names) == 2 && names[0] != first, nil
				})
			})

			var file, firstKey string
			t.Run("snapshot save while running", func(t *testing.T) {
				out := cli(t, 0, "snapshot", "save", "--name", "e2e", "--data-dir", dir)
				m := regexp.MustCompile(`Saved ` + ds + ` snapshot (\S+) `).FindStringSubmatch(out)
				if m == nil {
					t.Fatalf("no snapshot path in:\n%s", out)
				}
				file = m[1]
				if fileMode(t, file) != 0o600 {
					t.Errorf("snapshot mode %#o, want 0600", fileMode(t, file))
				}
				if _, err := s.client.CoreV1().ConfigMaps("default").Create(context.Background(), &corev1.ConfigMap{
					ObjectMeta: metav1.ObjectMeta{Name: "after-snapshot"},
				}, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
				out = cli(t, 1, "snapshot", "restore", file, "--data-dir", dir)
				wantText(t, out, "stop it before restoring")
			})
			t.Run("key rotation re-encrypts existing secrets", func(t *testing.T) {
				before := writeKey(t, cli(t, 0, "secrets-encrypt", "status", "--data-dir", dir))
				firstKey = before
				out := cli(t, 0, "secrets-encrypt", "rotate-keys", "--data-dir", dir)
				wantText(t, out, "removed old keys ["+before+"]")
				status := cli(t, 0, "secrets-encrypt", "status", "--data-dir", dir)
				after := writeKey(t, status)
				if after == before {
					t.Fatalf("write key still %s", before)
				}
				if strings.Contains(status, before) || strings.Contains(status, "Also decrypting") {
					t.Errorf("old key still configured:\n%s", status)
				}
				// Every stored Secret (ours and the controllers') is under the new key.
				m := regexp.MustCompile(`Stored Secrets: (\d+)\n\s+secretbox/` + regexp.QuoteMeta(after) + `: (\d+)\n`).FindStringSubmatch(status)
				if m == nil || m[1] != m[2] {
					t.Errorf("not every secret is under %s:\n%s", after, status)
				}
				got, err := s.client.CoreV1().Secrets("default").Get(context.Background(), "db-password", metav1.GetOptions{})
				if err != nil || string(got.Data["password"]) != secret {
					t.Fatalf("secret after rotation: %v, %v", got, err)
				}
			})

			if file == "" {
				t.FailNow()
			}
			s.stop()

			t.Run("snapshot save and restore while stopped", func(t *testing.T) {
				cli(t, 0, "snapshot", "save", "--name", "offline", "--data-dir", dir)
				out := cli(t, 0, "snapshot", "restore", file, "--data-dir", dir)
				wantText(t, out, "Restored "+ds+" snapshot")
				// The snapshot predates the key rotation: its Secrets need the retired key.
				wantText(t, out, "Put back retired encryption keys the snapshot's Secrets need: "+firstKey)
			})
			s2 := startServer(t, dir, "--datastore", ds)
			t.Run("the restored server has the snapshot's objects", func(t *testing.T) {
				ctx := context.Background()
				cm, err := s2.client.CoreV1().ConfigMaps("default").Get(ctx, "before-snapshot", metav1.GetOptions{})
				if err != nil || cm.Data["k"] != plain {
					t.Fatalf("ConfigMap from before the snapshot: %v, %v", cm, err)
				}
				if _, err := s2.client.CoreV1().ConfigMaps("default").Get(ctx, "after-snapshot", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
					t.Fatalf("ConfigMap created after the snapshot: %v, want NotFound", err)
				}
				got, err := s2.client.CoreV1().Secrets("default").Get(ctx, "db-password", metav1.GetOptions{})
				if err != nil || string(got.Data["password"]) != secret {
					t.Fatalf("secret after restore: %v, %v", got, err)
				}
				if _, err := s2.client.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
					ObjectMeta: metav1.ObjectMeta{Name: "after-restore"},
				}, metav1.CreateOptions{}); err != nil {
					t.Fatalf("write after restore: %v", err)
				}
			})
			s2.stop()
		})
	}
}

// filesContaining lists the files under dir whose bytes contain s.
func filesContaining(t *testing.T, dir, s string) []string {
	t.Helper()
	var found []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) {
				return nil // removed while walking (WAL, temporary files)
			}
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			if os.IsNotExist(err) {
				return nil
			}
			return err
		}
		if bytes.Contains(b, []byte(s)) {
			found = append(found, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

func fileMode(t *testing.T, path string) fs.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

func writeKey(t *testing.T, status string) string {
	t.Helper()
	m := regexp.MustCompile(`Write key: (\S+)`).FindStringSubmatch(status)
	if m == nil {
		t.Fatalf("no write key in:\n%s", status)
	}
	return m[1]
}

// scheduled lists the scheduled snapshot files, oldest first.
func scheduled(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "scheduled-") {
			names = append(names, e.Name())
		}
	}
	return names
}

// metricValue finds the sample named exactly series in a /metrics body.
func metricValue(t *testing.T, body, series string) float64 {
	t.Helper()
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	t.Fatalf("no %s in /metrics", series)
	return 0
}
