package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/testing/testenv"
)

// TestBadInput checks that each kind of bad input stops the server with a
// clear one-line cause and a non-zero exit, and damages nothing on disk.
func TestBadInput(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the real binary")
	}
	parallel(t, 30*time.Second)
	t.Run("invalid flags are all reported at once", func(t *testing.T) {
		out, code := runToExit(t, t.TempDir(), "--datastore", "foo", "--service-cidr", "10.43.0.0", "--tls-san", "bad_name!", "--write-kubeconfig-mode", "999")
		wantExit(t, code, out)
		for _, want := range []string{`--datastore "foo" is not one of: sqlite, etcd`, "--service-cidr", "--tls-san", "--write-kubeconfig-mode", "4 problems"} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
	})

	t.Run("port in use", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		port := l.Addr().(*net.TCPAddr).Port
		dir := t.TempDir()
		out, code := runToExit(t, dir, "--https-port", strconv.Itoa(port))
		wantExit(t, code, out)
		wantLine(t, out, "port "+strconv.Itoa(port)+" on 127.0.0.1 is already in use")
		if _, err := os.Stat(filepath.Join(dir, "tls")); !os.IsNotExist(err) {
			t.Errorf("certificates were minted although the port was taken: %v", err)
		}
	})

	t.Run("data dir not writable", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "a-file")
		writeFile(t, file, "x")
		out, code := runToExit(t, filepath.Join(file, "data"))
		wantExit(t, code, out)
		wantLine(t, out, "cannot be created")
		// A data dir that exists but is not writable: root writes anywhere,
		// so as root the server runs as testenv.UnprivilegedUser.
		ro := filepath.Join(testenv.SharedDir(t), "ro")
		if err := os.Mkdir(ro, 0o555); err != nil {
			t.Fatal(err)
		}
		out, code = runUnprivilegedToExit(t, ro)
		wantExit(t, code, out)
		wantLine(t, out, "is not writable")
	})

	t.Run("unknown datastore alone", func(t *testing.T) {
		out, code := runToExit(t, t.TempDir(), "--datastore=foo")
		wantExit(t, code, out)
		wantLine(t, out, `--datastore "foo" is not one of: sqlite, etcd`)
	})

	t.Run("key that does not match its certificate", func(t *testing.T) {
		dir := t.TempDir()
		s := startServer(t, dir)
		s.stop()
		tlsDir := filepath.Join(dir, "tls")
		// Swap the admin client key for the scheduler's: both exist, neither matches.
		adminKey := findOne(t, tlsDir, "admin", ".key")
		other := findOne(t, tlsDir, "scheduler", ".key")
		otherBytes := readFile(t, other)
		writeFile(t, adminKey, otherBytes)
		before := snapshot(t, dir)
		out, code := runToExit(t, dir)
		wantExit(t, code, out)
		wantLine(t, out, "does not match")
		if !strings.Contains(out, filepath.Base(adminKey)) {
			t.Errorf("error does not name %s:\n%s", adminKey, out)
		}
		assertUnchanged(t, dir, before)
	})

	t.Run("unreadable tls file", func(t *testing.T) {
		dir := t.TempDir()
		s := startServer(t, dir)
		s.stop()
		caKey := findOne(t, filepath.Join(dir, "tls"), "server-ca", ".key")
		// A directory in place of the key cannot be read, even by root.
		saved := readFile(t, caKey)
		if err := os.Remove(caKey); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(caKey, 0o700); err != nil {
			t.Fatal(err)
		}
		before := snapshot(t, dir)
		out, code := runToExit(t, dir)
		wantExit(t, code, out)
		if !strings.Contains(out, caKey) {
			t.Errorf("error does not name %s:\n%s", caKey, out)
		}
		assertUnchanged(t, dir, before)
		_ = saved
	})

	t.Run("clock before the CA's NotBefore", func(t *testing.T) {
		dir := t.TempDir()
		tlsDir := filepath.Join(dir, "tls")
		if err := os.MkdirAll(tlsDir, 0o700); err != nil {
			t.Fatal(err)
		}
		// A CA minted "in the future" is what a board with no RTC sees after booting in 1970.
		certPEM, keyPEM := futureCA(t, time.Now().Add(365*24*time.Hour))
		writeFile(t, filepath.Join(tlsDir, "server-ca.crt"), string(certPEM))
		writeFile(t, filepath.Join(tlsDir, "server-ca.key"), string(keyPEM))
		before := snapshot(t, dir)
		out, code := runToExit(t, dir)
		wantExit(t, code, out)
		wantLine(t, out, "before the")
		if !strings.Contains(out, "NotBefore") {
			t.Errorf("error does not explain the clock problem:\n%s", out)
		}
		assertUnchanged(t, dir, before)
	})

	t.Run("corrupt database", func(t *testing.T) {
		dir := t.TempDir()
		// A fixed port keeps the kubeconfigs identical between the two starts.
		port := freePort(t)
		s := startServer(t, dir, "--https-port", port)
		s.stop()
		db := filepath.Join(dir, "db", "state.db")
		for _, side := range []string{"-wal", "-shm"} {
			_ = os.Remove(db + side)
		}
		writeFile(t, db, strings.Repeat("not a database ", 512))
		before := snapshot(t, dir)
		out, code := runToExit(t, dir, "--https-port", port)
		wantExit(t, code, out)
		wantLine(t, out, "is not a valid SQLite database")
		if !strings.Contains(out, db) {
			t.Errorf("error does not name %s:\n%s", db, out)
		}
		assertUnchanged(t, dir, before)
	})

	t.Run("two servers on one data dir", func(t *testing.T) {
		dir := t.TempDir()
		s := startServer(t, dir)
		out, code := runToExit(t, dir)
		wantExit(t, code, out)
		wantLine(t, out, "is in use by another edgeplane server")
		if !strings.Contains(out, "pid "+strconv.Itoa(s.cmd.Process.Pid)) {
			t.Errorf("error does not name the holder's pid %d:\n%s", s.cmd.Process.Pid, out)
		}
		s.stop()
	})
}

func wantExit(t *testing.T, code int, out string) {
	t.Helper()
	if code == 0 {
		t.Fatalf("exit code 0, want non-zero:\n%s", out)
	}
}

// wantLine checks that the last line names the cause.
func wantLine(t *testing.T, out, want string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	last := lines[len(lines)-1]
	if !strings.HasPrefix(last, "edgeplane: ") || !strings.Contains(last, want) {
		t.Fatalf("last line %q does not say %q; output:\n%s", last, want, tail(out))
	}
}

func findOne(t *testing.T, dir, prefix, suffix string) string {
	t.Helper()
	var found []string
	_ = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), prefix) && strings.HasSuffix(d.Name(), suffix) {
			found = append(found, path)
		}
		return nil
	})
	if len(found) != 1 {
		t.Fatalf("want one %s*%s under %s, found %v", prefix, suffix, dir, found)
	}
	return found[0]
}

// snapshot records the contents of every regular file under dir.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() && d.Name() != "edgeplane.lock" {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			files[path] = string(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func assertUnchanged(t *testing.T, dir string, before map[string]string) {
	t.Helper()
	after := snapshot(t, dir)
	for path, content := range before {
		if after[path] != content {
			t.Errorf("%s changed or vanished after a failed start", path)
		}
	}
	for path := range after {
		if _, ok := before[path]; !ok && !strings.Contains(path, string(filepath.Separator)+"db"+string(filepath.Separator)) {
			t.Errorf("%s was created by a failed start", path)
		}
	}
}

// futureCA makes a self-signed CA whose validity starts at notBefore.
func futureCA(t *testing.T, notBefore time.Time) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "future-ca"},
		NotBefore: notBefore, NotAfter: notBefore.Add(10 * 365 * 24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

// runUnprivilegedToExit is runToExit as a user that file modes apply to:
// testenv.UnprivilegedUser when the tests run as root (with a copy of the
// binary it can execute), else the current user.
func runUnprivilegedToExit(t *testing.T, dataDir string, args ...string) (string, int) {
	t.Helper()
	if os.Geteuid() != 0 {
		return runToExit(t, dataDir, args...)
	}
	cred, _, _ := testenv.Unprivileged(t)
	bin := filepath.Join(testenv.SharedDir(t), "edgeplane")
	data, err := os.ReadFile(binary)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	base := command(dataDir, args...)
	cmd := exec.CommandContext(ctx, bin, base.Args[1:]...)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("run edgeplane as %s: %v (want a non-zero exit)\n%s", testenv.UnprivilegedUser, err, out)
	}
	return string(out), ee.ExitCode()
}
