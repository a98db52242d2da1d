package e2e

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
)

// datastoreFaultEnv is pkg/bootstrap's DatastoreFaultEnv: with it set to 1
// in the server's environment, SIGUSR2 breaks the datastore from inside
// (kine's socket closed, embedded etcd's member stopped). A test hook only.
const datastoreFaultEnv = "EDGEPLANE_TEST_DATASTORE_FAULT"

// endedLine is the one line a server prints when a component ended under it.
var endedLine = regexp.MustCompile(`(?m)^edgeplane: (\S+) stopped unexpectedly: (.+)$`)

// fatalLine is a klog fatal line (an upstream post-start hook dying, say).
var fatalLine = regexp.MustCompile(`(?m)^F\d{4} `)

// exitCode is a finished server's exit code (-1 when killed by a signal).
func (s *server) exitCode() int {
	var ee *exec.ExitError
	if errors.As(s.exitErr, &ee) {
		return ee.ExitCode()
	}
	return 0
}

// TestDatastoreDeathStopsServer: when the datastore dies under a running
// server, the process exits non-zero within seconds with one line naming the
// datastore and its error, so that systemd's Restart=on-failure restarts it.
// It used to stay up, unready, for ever.
func TestDatastoreDeathStopsServer(t *testing.T) {
	if testing.Short() {
		t.Skip("e2e")
	}
	parallel(t)
	const within = 15 * time.Second
	for _, tc := range []struct {
		datastore string
		wantErr   string
	}{
		{"sqlite", "kine stopped serving"},
		{"etcd", "etcd: the member stopped"},
	} {
		t.Run(tc.datastore, func(t *testing.T) {
			dir := t.TempDir()
			s := startServerCmd(t, dir, withEnv(command(dir, "--datastore", tc.datastore), datastoreFaultEnv+"=1"))
			if _, err := s.kubectl("get", "namespaces"); err != nil {
				t.Fatalf("the server does not serve before the fault: %v", err)
			}
			begin := time.Now()
			if err := s.cmd.Process.Signal(syscall.SIGUSR2); err != nil {
				t.Fatal(err)
			}
			select {
			case <-s.exited:
			case <-time.After(time.Minute):
				t.Fatalf("still running a minute after its datastore died:\n%s", tail(s.output.String()))
			}
			took := time.Since(begin)
			out := s.output.String()
			t.Logf("exited %s after the fault with code %d", took.Round(time.Millisecond), s.exitCode())
			if took > within {
				t.Errorf("exited %s after the fault, want within %s", took.Round(time.Millisecond), within)
			}
			if s.exitCode() == 0 {
				t.Errorf("exit code 0 after the datastore died, want non-zero")
			}
			m := endedLine.FindAllStringSubmatch(out, -1)
			if len(m) != 1 {
				t.Fatalf("%d lines 'edgeplane: ... stopped unexpectedly', want one:\n%s", len(m), tail(out))
			}
			if m[0][1] != tc.datastore || !strings.Contains(m[0][2], tc.wantErr) {
				t.Errorf("last line names %q: %q; want %q and an error containing %q", m[0][1], m[0][2], tc.datastore, tc.wantErr)
			}
			if !strings.Contains(out, "Test hook: broke the datastore") {
				t.Errorf("the server did not log the fault it was asked for:\n%s", tail(out))
			}
		})
	}
}

// TestSIGTERMDuringStartup: a SIGTERM while the API server chain is being
// built, or while its post-start hooks run, stops the server promptly and
// cleanly: exit 0, no upstream fatal line. It used to wait for the build,
// start the chain, and then die in a post-start hook (exit 255,
// "PostStartHook ... failed"); a SIGTERM during the hooks did the same.
func TestSIGTERMDuringStartup(t *testing.T) {
	if testing.Short() {
		t.Skip("e2e")
	}
	parallel(t)
	// buildBegun: the chain's build writes its authentication config first;
	// the rest of the build takes seconds.
	buildBegun := func(_ *server, dir string) bool {
		_, err := os.Stat(filepath.Join(dir, "config", "authentication-config.yaml"))
		return err == nil
	}
	// serving: the chain serves; its post-start hooks run for about a second.
	serving := func(s *server, _ string) bool {
		return strings.Contains(s.output.String(), `"Serving" logger="edgeplane.apiserver"`)
	}
	// A build is abandoned at once. During the hooks the server waits for
	// them (pkg/chain hookWait, 10 s at most; 0.7-1.7 s idle, 5.5 s measured
	// at a load of 12 on 2 cores), then drains (~1 s).
	const (
		buildWithin = 5 * time.Second
		hooksWithin = 15 * time.Second
	)
	for _, tc := range []struct {
		name, datastore string
		when            func(s *server, dir string) bool // SIGTERM once it is true
		within          time.Duration
	}{
		{"sqlite during the build", "sqlite", buildBegun, buildWithin},
		{"etcd during the build", "etcd", buildBegun, buildWithin},
		{"sqlite during the post-start hooks", "sqlite", serving, hooksWithin},
		{"etcd during the post-start hooks", "etcd", serving, hooksWithin},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s := launch(t, dir, "--datastore", tc.datastore, "-v", "1")
			if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
				select {
				case <-s.exited:
					return false, errors.New("exited")
				default:
				}
				return tc.when(s, dir), nil
			}); err != nil {
				t.Fatalf("the moment to send SIGTERM did not come (%v):\n%s", err, tail(s.output.String()))
			}
			begin := time.Now()
			if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			select {
			case <-s.exited:
			case <-time.After(time.Minute):
				t.Fatalf("still running a minute after SIGTERM:\n%s", tail(s.output.String()))
			}
			took := time.Since(begin)
			out := s.output.String()
			t.Logf("exited %s after SIGTERM with code %d", took.Round(time.Millisecond), s.exitCode())
			if took > tc.within {
				t.Errorf("exited %s after SIGTERM, want within %s", took.Round(time.Millisecond), tc.within)
			}
			if s.exitCode() != 0 {
				t.Errorf("exit code %d after SIGTERM during start-up, want 0:\n%s", s.exitCode(), tail(out))
			}
			if f := fatalLine.FindString(out); f != "" {
				t.Errorf("a fatal line after SIGTERM during start-up:\n%s", tail(out))
			}
			if readyLine.MatchString(out) {
				t.Errorf("the server said it was ready after SIGTERM during start-up")
			}
		})
	}
}

// TestTokensBeforeReadyz: the moment /readyz first answers 200, the node
// token (and with --cluster-init the server join token) is in the data dir
// and `edgeplane token` prints it. It used to be written a moment after.
func TestTokensBeforeReadyz(t *testing.T) {
	if testing.Short() {
		t.Skip("e2e")
	}
	parallel(t)
	for _, tc := range []struct {
		name  string
		args  []string
		files map[string][]string // token file -> the `edgeplane token` args that print it
	}{
		{"sqlite", nil, map[string][]string{"node-token": {"token", "--node"}}},
		{"etcd cluster-init", append([]string{"--datastore", "etcd", "--cluster-init"}, etcdArgs(t, "192.0.2.30")...),
			map[string][]string{"node-token": {"token", "--node"}, "token": {"token"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s := launch(t, dir, tc.args...)
			url := apiURL(t, s, dir)
			client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
				TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // only /readyz's status is read
			}}
			defer client.CloseIdleConnections()
			var missing []string
			polls := 0
			err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
				select {
				case <-s.exited:
					return false, errors.New("the server exited")
				default:
				}
				polls++
				resp, err := client.Get(url + "/readyz")
				if err != nil {
					return false, nil
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					return false, nil
				}
				// The first 200: the tokens must be there now.
				for f := range tc.files {
					if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
						missing = append(missing, f)
					}
				}
				return true, nil
			})
			if err != nil {
				t.Fatalf("/readyz never answered 200 (%v):\n%s", err, tail(s.output.String()))
			}
			t.Logf("/readyz answered 200 after %d polls", polls)
			if len(missing) > 0 {
				t.Fatalf("when /readyz first answered 200, %v were not in the data dir yet", missing)
			}
			for f, args := range tc.files {
				out, err := exec.Command(binary, append(args, "--data-dir", dir)...).CombinedOutput()
				if err != nil || !strings.HasPrefix(string(out), "K10") {
					t.Errorf("edgeplane %v (for %s): %v, %q", args, f, err, out)
				}
			}
		})
	}
}

// apiURL waits for the admin kubeconfig, which certs.Ensure writes early in
// start-up, and returns the API server URL it names (the port chosen by
// --https-port 0).
func apiURL(t *testing.T, s *server, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "admin.kubeconfig")
	var url string
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		select {
		case <-s.exited:
			return false, errors.New("the server exited")
		default:
		}
		cfg, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			return false, nil
		}
		url = cfg.Host
		return true, nil
	})
	if err != nil {
		t.Fatalf("no admin kubeconfig in %s (%v):\n%s", dir, err, tail(s.output.String()))
	}
	return url
}
