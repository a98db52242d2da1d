package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// etcdArgs gives a server its own etcd ports and advertise address.
func etcdArgs(t *testing.T, ip string) []string {
	return []string{"--etcd-client-port", freePort(t), "--etcd-peer-port", freePort(t), "--advertise-address", ip}
}

func edgeplane(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(binary, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("edgeplane %v: %v\n%s", args, err, out)
	}
	return string(out)
}

func createConfigMap(ctx context.Context, s *server, name string) error {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"k": name}}
	_, err := s.client.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{})
	return err
}

// TestEtcdCluster forms a three-server embedded etcd cluster, checks that
// writes through any server are read through the others, kills one and
// measures how soon a survivor accepts writes, restarts it, and removes a
// member.
func TestEtcdCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("e2e")
	}
	parallel(t)
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	ips := []string{"192.0.2.10", "192.0.2.11", "192.0.2.12"}
	args := [][]string{etcdArgs(t, ips[0]), etcdArgs(t, ips[1]), etcdArgs(t, ips[2])}

	begin := time.Now()
	s1 := startServer(t, dirs[0], append([]string{"--cluster-init"}, args[0]...)...)
	t.Logf("first server ready after %v", time.Since(begin).Round(time.Millisecond))
	tok := token(t, dirs[0])

	t.Run("refuses a token pinning another CA", func(t *testing.T) {
		secret := tok[strings.Index(tok, "::server:")+len("::server:"):]
		bad := "K10" + strings.Repeat("0", 64) + "::server:" + secret
		out, code := runToExit(t, t.TempDir(), append([]string{"--server", s1.config.Host, "--token", bad}, etcdArgs(t, "192.0.2.13")...)...)
		if code == 0 || !strings.Contains(out, "does not match the token") {
			t.Fatalf("exit %d, output:\n%s", code, tail(out))
		}
	})

	begin = time.Now()
	s2 := startServer(t, dirs[1], append([]string{"--server", s1.config.Host, "--token", tok}, args[1]...)...)
	t.Logf("second server joined after %v", time.Since(begin).Round(time.Millisecond))
	begin = time.Now()
	// The third joins through the second: any server lets others join.
	s3 := startServer(t, dirs[2], append([]string{"--server", s2.config.Host, "--token", tok}, args[2]...)...)
	t.Logf("third server joined after %v", time.Since(begin).Round(time.Millisecond))
	servers := []*server{s1, s2, s3}
	// One kubelet-serving CA: every API server must accept the kubelet
	// serving certificates any controller-manager signs.
	for _, f := range []string{"tls/kubelet-serving-ca.crt", "tls/kubelet-serving-ca.key"} {
		want := readFile(t, filepath.Join(dirs[0], f))
		for i, d := range dirs[1:] {
			if readFile(t, filepath.Join(d, f)) != want {
				t.Errorf("server %d's %s differs from the first's", i+2, f)
			}
		}
	}

	if out := edgeplane(t, "etcd", "member", "list", "--data-dir", dirs[0]); strings.Count(out, "https://127.0.0.1:") != 6 {
		t.Fatalf("member list:\n%s", out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for i, w := range servers {
		name := fmt.Sprintf("via-%d", i+1)
		if err := createConfigMap(ctx, w, name); err != nil {
			t.Fatalf("write through server %d: %v", i+1, err)
		}
		for j, r := range servers {
			eventually(t, 30*time.Second, fmt.Sprintf("%s read through server %d", name, j+1), func(ctx context.Context) (bool, error) {
				_, err := r.client.CoreV1().ConfigMaps("default").Get(ctx, name, metav1.GetOptions{})
				return err == nil, err
			})
		}
	}
	eventually(t, time.Minute, "kubernetes endpoints list the three servers", func(ctx context.Context) (bool, error) {
		got, err := endpointIPs(ctx, s1)
		return strings.Join(got, ",") == strings.Join(ips, ","), err
	})

	// SIGKILL the first server (the cluster's founder) and time how soon a
	// survivor accepts a write again.
	s1.kill()
	killed := time.Now()
	eventually(t, time.Minute, "a write through a survivor", func(ctx context.Context) (bool, error) {
		// Short attempts, so that the measure is not rounded up to one.
		ctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		err := createConfigMap(ctx, s2, "after-kill")
		return err == nil, err
	})
	t.Logf("FAILOVER: first write through a survivor %v after SIGKILL", time.Since(killed).Round(time.Millisecond))
	if _, err := s3.client.CoreV1().ConfigMaps("default").Get(ctx, "after-kill", metav1.GetOptions{}); err != nil {
		t.Fatalf("read through the other survivor: %v", err)
	}
	if err := createConfigMap(ctx, s3, "after-kill-3"); err != nil {
		t.Fatalf("write through the other survivor: %v", err)
	}

	// The killed server rejoins on restart and catches up.
	begin = time.Now()
	s1 = startServer(t, dirs[0], append([]string{"--cluster-init"}, args[0]...)...)
	t.Logf("killed server rejoined after %v", time.Since(begin).Round(time.Millisecond))
	eventually(t, 30*time.Second, "the restarted server sees writes made while it was down", func(ctx context.Context) (bool, error) {
		_, err := s1.client.CoreV1().ConfigMaps("default").Get(ctx, "after-kill-3", metav1.GetOptions{})
		return err == nil, err
	})

	// Remove the third server from the cluster.
	s3.stop()
	name, err := os.ReadFile(filepath.Join(dirs[2], "db", "etcd-member-name"))
	if err != nil {
		t.Fatal(err)
	}
	edgeplane(t, "etcd", "member", "remove", strings.TrimSpace(string(name)), "--data-dir", dirs[0])
	if out := edgeplane(t, "etcd", "member", "list", "--data-dir", dirs[1]); strings.Contains(out, strings.TrimSpace(string(name))) {
		t.Fatalf("member %s still listed:\n%s", name, out)
	}
	if err := createConfigMap(ctx, s2, "after-remove"); err != nil {
		t.Fatalf("write after removing a member: %v", err)
	}
}
