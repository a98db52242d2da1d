package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// maxStartLines bounds what a first start prints at -v 0 up to the ready
// line: the certificates issued (~10 lines), the start-up phases (~12), the
// readiness checks that were slow to turn ok (up to ~45 on a loaded machine,
// where every check is), a few more. Upstream's info lines (~400) are not
// among them.
const maxStartLines = 120

// startInNetns starts edgeplane in a network namespace of its own, so that
// the fixed loopback ports upstream's ComponentStatus probes (10257, 10259)
// are this server's alone, and returns it with a kubectl that runs there.
func startInNetns(t *testing.T, args ...string) (*server, func(args ...string) (string, error)) {
	t.Helper()
	ns := fmt.Sprintf("ep-e2e-cs-%d", os.Getpid())
	ipCmd(t, "netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	ipCmd(t, "-n", ns, "link", "set", "lo", "up")
	// A host address and a default route for the advertise address, on a
	// veth pair with both ends inside the namespace: nothing leaves it.
	ipCmd(t, "-n", ns, "link", "add", "epcs0", "type", "veth", "peer", "name", "epcs1")
	ipCmd(t, "-n", ns, "addr", "add", "10.202.0.1/24", "dev", "epcs0")
	ipCmd(t, "-n", ns, "link", "set", "epcs0", "up")
	ipCmd(t, "-n", ns, "link", "set", "epcs1", "up")
	ipCmd(t, "-n", ns, "route", "add", "default", "dev", "epcs0")
	dir := t.TempDir()
	cmd := command(dir, args...)
	cmd = exec.Command("ip", append([]string{"netns", "exec", ns}, cmd.Args...)...)
	s := waitReady(t, launchCmd(t, dir, cmd))
	kubectl := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		argv := append([]string{"netns", "exec", ns, "kubectl", "--kubeconfig", s.kubeconfig}, args...)
		out, err := exec.CommandContext(ctx, "ip", argv...).CombinedOutput()
		return string(out), err
	}
	return s, kubectl
}

// TestWhatUsersSee checks, on one first start at the default verbosity, what
// a user meets first: `kubectl get componentstatuses` says Healthy for every
// component, the journal holds edgeplane's timeline and no upstream chatter,
// and the binary, built without -ldflags (TestMain), reports go.mod's
// Kubernetes version.
func TestWhatUsersSee(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the real server")
	}
	s, kubectl := startInNetns(t)

	t.Run("componentstatuses", func(t *testing.T) {
		want := map[string]bool{"controller-manager": false, "scheduler": false, "etcd-0": false}
		eventually(t, 30*time.Second, "every component Healthy", func(context.Context) (bool, error) {
			out, err := kubectl("get", "componentstatuses", "--no-headers")
			if err != nil {
				return false, fmt.Errorf("%v: %s", err, out)
			}
			for name := range want {
				want[name] = false
			}
			for _, line := range strings.Split(out, "\n") {
				f := strings.Fields(line)
				if len(f) >= 2 && f[0] != "Warning:" {
					if _, ok := want[f[0]]; ok {
						want[f[0]] = f[1] == "Healthy"
					}
				}
			}
			for name, healthy := range want {
				if !healthy {
					return false, fmt.Errorf("%s not Healthy in:\n%s", name, out)
				}
			}
			return true, nil
		})
	})

	t.Run("version", func(t *testing.T) {
		want := goModKubernetes(t)
		out, err := kubectl("version", "-o", "json")
		if err != nil || !strings.Contains(out, `"gitVersion": "`+want+`"`) || strings.Contains(out, "v0.0.0-master") {
			t.Fatalf("kubectl version (want server %s): %v\n%s", want, err, out)
		}
		local, err := exec.Command(binary, "version").CombinedOutput()
		if err != nil || !strings.Contains(string(local), "kubernetes "+want+"\n") {
			t.Fatalf("edgeplane version (want kubernetes %s): %v\n%s", want, err, local)
		}
	})

	t.Run("start-up log at -v 0", func(t *testing.T) {
		out := s.output.String()
		end := readyLine.FindStringIndex(out)
		if end == nil {
			t.Fatalf("no ready line in:\n%s", tail(out))
		}
		upToReady := out[:end[1]]
		if nl := strings.IndexByte(out[end[1]:], '\n'); nl >= 0 {
			upToReady = out[:end[1]+nl]
		}
		lines := strings.Split(strings.TrimSpace(upToReady), "\n")
		if len(lines) > maxStartLines {
			t.Errorf("%d lines up to ready at -v 0, want at most %d:\n%s", len(lines), maxStartLines, tail(upToReady))
		}
		// Upstream's info lines carry no edgeplane logger name; ours all do.
		own := regexp.MustCompile(`logger="edgeplane`)
		for _, line := range lines {
			if strings.HasPrefix(line, "I") && !own.MatchString(line) {
				t.Errorf("an info line that is not edgeplane's: %s", line)
			}
			for _, noise := range []string{"The manifest file is empty", "empty allow-list mapping", "because it has no resources", "Found stale data"} {
				if strings.Contains(line, noise) {
					t.Errorf("upstream noise at -v 0: %s", line)
				}
			}
		}
		t.Logf("%d lines up to ready at -v 0", len(lines))
	})
}

// goModKubernetes is the k8s.io/kubernetes version go.mod requires.
func goModKubernetes(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "k8s.io/kubernetes" && strings.HasPrefix(f[1], "v1.") {
			return f[1]
		}
	}
	t.Fatal("go.mod requires no k8s.io/kubernetes")
	return ""
}
