package e2e

import (
	"context"
	"fmt"
	"net/http"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestEtcdFault runs edgeplane on an external etcd in its own process and
// pauses (SIGSTOP/SIGCONT) and kills (SIGKILL, then a restart on the same
// data) that etcd while clients are connected. It checks that writes fail
// with an error within the request's timeout, that /readyz turns 500 naming
// the etcd check, that edgeplane stays up and recovers by itself once etcd is
// back, and that every acknowledged write survives.
func TestEtcdFault(t *testing.T) {
	if testing.Short() {
		t.Skip("e2e")
	}
	parallel(t, 45*time.Second)
	pki := externalEtcdPKI(t)
	e := faultNewEtcd(t, pki)
	e.start()

	s := startServer(t, t.TempDir(), "--datastore-endpoint", e.client, "--datastore-cafile", pki.EtcdCA.Cert,
		"--datastore-certfile", pki.EtcdClient.Cert, "--datastore-keyfile", pki.EtcdClient.Key,
		"--advertise-address", "192.0.2.10")
	faultWaitReadyz(t, s, http.StatusOK, time.Minute)
	acked := faultWrites(t, s, "before", 10)

	pause := 5 * time.Second
	cycles := 1
	if faultFull() {
		pause, cycles = 90*time.Second, 3
	}
	const serverTimeout = 5 * time.Second

	for cycle := range cycles {
		t.Run(fmt.Sprintf("paused %d", cycle), func(t *testing.T) {
			e.signal(syscall.SIGSTOP)
			stopped := time.Now()
			faultWaitEtcdUnready(t, s, "paused")
			faultWriteFails(t, s, "paused", fmt.Sprintf("paused-%d", cycle), "paused", serverTimeout)
			if faultFull() && cycle == 0 {
				d, err := faultCreate(s, "paused-default-timeout", 0)
				t.Logf("paused: create with the default timeout failed after %v: %v", d.Round(time.Millisecond), err)
				if err == nil {
					t.Fatal("a write succeeded while etcd was paused")
				}
			}
			faultStaysUnready(t, s, "paused", stopped.Add(pause))
			faultAlive(t, s)

			e.signal(syscall.SIGCONT)
			took, _ := faultWaitReadyz(t, s, http.StatusOK, 2*time.Minute)
			wbegin := time.Now()
			eventually(t, time.Minute, "a write after SIGCONT", func(context.Context) (bool, error) {
				_, err := faultCreate(s, fmt.Sprintf("resumed-%d", cycle), serverTimeout)
				return err == nil, err
			})
			t.Logf("paused %v: /readyz 200 %v after SIGCONT, first write after another %v",
				pause, took.Round(time.Millisecond), time.Since(wbegin).Round(time.Millisecond))
			faultRecoverKinds(t, s, fmt.Sprintf("kinds-resumed-%d", cycle), wbegin)
			if faultFull() {
				faultWatchReadyz(t, s, time.Minute)
			}
			acked = append(acked, fmt.Sprintf("resumed-%d", cycle))
			acked = append(acked, faultWrites(t, s, fmt.Sprintf("after-pause-%d", cycle), 5)...)
		})
	}

	for cycle := range cycles {
		t.Run(fmt.Sprintf("killed %d", cycle), func(t *testing.T) {
			e.signal(syscall.SIGKILL)
			faultWaitEtcdUnready(t, s, "killed")
			faultWriteFails(t, s, "killed", fmt.Sprintf("killed-%d", cycle), "down", serverTimeout)
			if faultFull() {
				faultStaysUnready(t, s, "killed", time.Now().Add(pause))
			}
			faultAlive(t, s)

			e.start()
			restarted := time.Now()
			took, _ := faultWaitReadyz(t, s, http.StatusOK, 2*time.Minute)
			eventually(t, time.Minute, "a write after the restart", func(context.Context) (bool, error) {
				_, err := faultCreate(s, fmt.Sprintf("restarted-%d", cycle), serverTimeout)
				return err == nil, err
			})
			t.Logf("killed: /readyz 200 %v after etcd answered again, first write %v after", took.Round(time.Millisecond),
				time.Since(restarted).Round(time.Millisecond))
			faultRecoverKinds(t, s, fmt.Sprintf("kinds-restarted-%d", cycle), restarted)
			if faultFull() {
				faultWatchReadyz(t, s, time.Minute)
			}
			acked = append(acked, fmt.Sprintf("restarted-%d", cycle))

			list, err := s.client.CoreV1().ConfigMaps("default").List(context.Background(), metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			have := map[string]bool{}
			for _, cm := range list.Items {
				have[cm.Name] = true
			}
			for _, name := range acked {
				if !have[name] {
					t.Errorf("acknowledged ConfigMap %s is missing after the etcd restart", name)
				}
			}
			t.Logf("all %d acknowledged writes present", len(acked))
			acked = append(acked, faultWrites(t, s, fmt.Sprintf("after-kill-%d", cycle), 5)...)
		})
	}
	faultAlive(t, s)
	if !faultFull() {
		begin := time.Now()
		s.stop()
		t.Logf("SIGTERM after the faults: clean exit in %v", time.Since(begin).Round(time.Millisecond))
		return
	}
	// Full form: a service manager stopping edgeplane during an outage.
	e.signal(syscall.SIGSTOP)
	faultWaitEtcdUnready(t, s, "paused before SIGTERM")
	begin := time.Now()
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
		t.Logf("SIGTERM with etcd paused: exit after %v: %v; last line: %s", time.Since(begin).Round(time.Millisecond),
			s.exitErr, faultLastLine(s.output.String()))
	case <-time.After(2 * time.Minute):
		t.Errorf("SIGTERM with etcd paused: still running after 2 minutes")
	}
	e.signal(syscall.SIGCONT)
}
