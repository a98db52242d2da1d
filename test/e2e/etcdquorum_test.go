package e2e

import (
	"context"
	"net/http"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestEtcdFaultQuorum runs a three-server embedded etcd cluster, SIGKILLs two
// servers so that the survivor's etcd member loses quorum, and checks that
// the survivor stays up, turns unready naming etcd and fails writes, and
// recovers by itself once the two are restarted, with every acknowledged
// write present. The full form also waits out a write with the API server's
// default timeout (a minute).
func TestEtcdFaultQuorum(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three servers")
	}
	parallel(t, 40*time.Second)
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	args := [][]string{etcdArgs(t, "192.0.2.10"), etcdArgs(t, "192.0.2.11"), etcdArgs(t, "192.0.2.12")}
	s1 := startServer(t, dirs[0], append([]string{"--cluster-init"}, args[0]...)...)
	tok := token(t, dirs[0])
	join := func(i int) *server {
		return startServer(t, dirs[i], append([]string{"--server", s1.config.Host, "--token", tok}, args[i]...)...)
	}
	s2, s3 := join(1), join(2)
	faultWaitReadyz(t, s1, http.StatusOK, time.Minute)
	acked := faultWrites(t, s1, "quorum-before", 5)

	s2.kill()
	s3.kill()
	faultWaitEtcdUnready(t, s1, "quorum lost")
	const serverTimeout = 5 * time.Second
	d, err := faultCreate(s1, "quorum-lost", serverTimeout)
	t.Logf("quorum lost: create with timeout=%v failed after %v: %v", serverTimeout, d.Round(time.Millisecond), err)
	if err == nil {
		t.Fatal("a write succeeded without quorum")
	}
	if faultFull() {
		d, err = faultCreate(s1, "quorum-lost-default", 0)
		t.Logf("quorum lost: create with the default timeout failed after %v: %v", d.Round(time.Millisecond), err)
		if err == nil {
			t.Fatal("a write succeeded without quorum")
		}
	}
	faultAlive(t, s1)

	begin := time.Now()
	s2, s3 = join(1), join(2)
	t.Logf("quorum back: two servers restarted in %v", time.Since(begin).Round(time.Millisecond))
	took, _ := faultWaitReadyz(t, s1, http.StatusOK, 2*time.Minute)
	t.Logf("quorum back: survivor /readyz 200 %v after the restarts", took.Round(time.Millisecond))
	eventually(t, time.Minute, "a write through the survivor", func(context.Context) (bool, error) {
		_, err := faultCreate(s1, "quorum-back", serverTimeout)
		return err == nil, err
	})
	for _, name := range acked {
		for i, s := range []*server{s1, s2, s3} {
			if _, err := s.client.CoreV1().ConfigMaps("default").Get(context.Background(), name, metav1.GetOptions{}); err != nil {
				t.Errorf("acknowledged %s through server %d: %v", name, i+1, err)
			}
		}
	}
	faultAlive(t, s1)
}
