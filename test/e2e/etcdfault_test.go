package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// faultReadyz asks /readyz?verbose; the status is 0 when it did not answer.
func faultReadyz(s *server) (int, string) {
	cfg := rest.CopyConfig(s.config)
	cfg.Timeout = 5 * time.Second
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return 0, err.Error()
	}
	resp, err := hc.Get(cfg.Host + "/readyz?verbose")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// faultWatchReadyz polls /readyz for d after a recovery and logs every
// stretch in which it was not 200, with the checks that failed.
func faultWatchReadyz(t *testing.T, s *server, d time.Duration) {
	t.Helper()
	begin := time.Now()
	var badSince time.Time
	var failing []string
	bad := time.Duration(0)
	for time.Since(begin) < d {
		code, body := faultReadyz(s)
		switch {
		case code != http.StatusOK && badSince.IsZero():
			badSince, failing = time.Now(), faultFailing(body)
		case code == http.StatusOK && !badSince.IsZero():
			t.Logf("after recovery: /readyz %v unready from +%v, failing %v", time.Since(badSince).Round(time.Millisecond),
				badSince.Sub(begin).Round(time.Millisecond), failing)
			bad += time.Since(badSince)
			badSince = time.Time{}
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !badSince.IsZero() {
		t.Errorf("after recovery: /readyz still unready %v later, failing %v", d, failing)
	}
	t.Logf("after recovery: /readyz unready %v of the %v watched", bad.Round(time.Millisecond), d)
}

// faultRecoverKinds writes one object of several kinds, each kept in etcd
// through its own client of the API server, retrying each until it works,
// and logs how long each kind took after since.
func faultRecoverKinds(t *testing.T, s *server, tag string, since time.Time) {
	t.Helper()
	meta := metav1.ObjectMeta{Name: tag, Namespace: "default"}
	kinds := []struct {
		name   string
		create func(ctx context.Context) error
	}{
		{"configmaps", func(ctx context.Context) error {
			_, err := s.client.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: meta}, metav1.CreateOptions{})
			return err
		}},
		{"secrets", func(ctx context.Context) error {
			_, err := s.client.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: meta}, metav1.CreateOptions{})
			return err
		}},
		{"serviceaccounts", func(ctx context.Context) error {
			_, err := s.client.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: meta}, metav1.CreateOptions{})
			return err
		}},
		{"leases", func(ctx context.Context) error {
			_, err := s.client.CoordinationV1().Leases("default").Create(ctx, &coordinationv1.Lease{ObjectMeta: meta}, metav1.CreateOptions{})
			return err
		}},
	}
	var took []string
	for _, k := range kinds {
		eventually(t, 3*time.Minute, "a write of "+k.name, func(ctx context.Context) (bool, error) {
			ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			err := k.create(ctx)
			return err == nil, err
		})
		took = append(took, fmt.Sprintf("%s %v", k.name, time.Since(since).Round(time.Millisecond)))
	}
	t.Logf("%s: writes work again (after): %s", tag, strings.Join(took, ", "))
}

// faultFailing lists the failing checks of a verbose /readyz body.
func faultFailing(body string) []string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "[-]") {
			out = append(out, strings.TrimPrefix(l, "[-]"))
		}
	}
	return out
}

// faultWaitReadyz polls /readyz until its status is want; it returns how long
// that took and the last body.
func faultWaitReadyz(t *testing.T, s *server, want int, timeout time.Duration) (time.Duration, string) {
	t.Helper()
	begin := time.Now()
	var body string
	for time.Since(begin) < timeout {
		var code int
		code, body = faultReadyz(s)
		if code == want {
			return time.Since(begin), body
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("/readyz did not turn %d within %v; last body:\n%s\nserver output:\n%s", want, timeout, body, tail(s.output.String()))
	return 0, ""
}

// faultWaitEtcdUnready polls /readyz until it is 500 with a failing etcd
// check; it logs when /readyz first turned 500 and what failed then.
func faultWaitEtcdUnready(t *testing.T, s *server, what string) {
	t.Helper()
	begin := time.Now()
	first := time.Duration(-1)
	var body string
	for time.Since(begin) < 30*time.Second {
		var code int
		code, body = faultReadyz(s)
		if code == http.StatusInternalServerError {
			failing := faultFailing(body)
			if first < 0 {
				first = time.Since(begin)
				t.Logf("%s: /readyz 500 after %v, failing: %v", what, first.Round(time.Millisecond), failing)
			}
			if faultNamesEtcd(failing) {
				t.Logf("%s: /readyz names etcd after %v, failing: %v", what, time.Since(begin).Round(time.Millisecond), failing)
				return
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("%s: /readyz does not fail on etcd within 30 s; last body:\n%s\nserver output:\n%s", what, body, tail(s.output.String()))
}

// faultStaysUnready polls /readyz until the deadline: while etcd is down it
// must never answer 200, and it must answer 500 at least once by the
// deadline (a probe that times out on a loaded machine is retried, not
// taken for an answer).
func faultStaysUnready(t *testing.T, s *server, what string, until time.Time) {
	t.Helper()
	var unready, other int
	var last string
	for first := true; first || time.Now().Before(until) || unready == 0; first = false {
		if time.Now().After(until.Add(time.Minute)) {
			t.Fatalf("%s: /readyz never answered 500 up to a minute past the fault's end (%d other answers, last: %s)", what, other, last)
		}
		code, body := faultReadyz(s)
		switch code {
		case http.StatusOK:
			t.Fatalf("%s: /readyz answered 200 while etcd was down:\n%s", what, body)
		case http.StatusInternalServerError:
			unready++
		default:
			other++
			last = fmt.Sprintf("%d %s", code, body)
		}
		select {
		case <-s.exited:
			t.Fatalf("%s: edgeplane exited (%v):\n%s", what, s.exitErr, tail(s.output.String()))
		case <-time.After(250 * time.Millisecond):
		}
	}
	t.Logf("%s: /readyz answered 500 %d times and nothing else but %d probes without an answer until the fault's end", what, unready, other)
}

// faultCreate creates ConfigMap name, asking the API server to give up after
// serverTimeout (0: the API server's default); the client waits serverTimeout
// plus 30 s, or 90 s.
func faultCreate(s *server, name string, serverTimeout time.Duration) (time.Duration, error) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"k": name}}
	wait := serverTimeout + 30*time.Second
	if serverTimeout == 0 {
		wait = 90 * time.Second // the API server's --request-timeout is 60 s
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	begin := time.Now()
	req := s.client.CoreV1().RESTClient().Post().Namespace("default").Resource("configmaps").
		Body(runtime.Object(cm)).VersionedParams(&metav1.CreateOptions{}, scheme.ParameterCodec)
	if serverTimeout > 0 {
		req = req.Param("timeout", serverTimeout.String()) // the server's deadline, not the client's
	}
	err := req.Do(ctx).Error()
	return time.Since(begin), err
}

// faultWrites creates n ConfigMaps prefix-0..n-1 and fails on any error.
func faultWrites(t *testing.T, s *server, prefix string, n int) []string {
	t.Helper()
	var names []string
	for i := range n {
		name := fmt.Sprintf("%s-%d", prefix, i)
		if _, err := faultCreate(s, name, 10*time.Second); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		names = append(names, name)
	}
	return names
}

// faultAlive fails the test if edgeplane has exited.
func faultAlive(t *testing.T, s *server) {
	t.Helper()
	select {
	case <-s.exited:
		t.Fatalf("edgeplane exited (%v) during the datastore fault:\n%s", s.exitErr, tail(s.output.String()))
	default:
	}
}

// faultWriteFails creates name during an outage (kind: "paused", "killed")
// and checks that the write fails, and within about its timeout.
func faultWriteFails(t *testing.T, s *server, kind, name, state string, timeout time.Duration) {
	t.Helper()
	d, err := faultCreate(s, name, timeout)
	t.Logf("%s: create with timeout=%v failed after %v: %v", kind, timeout, d.Round(time.Millisecond), err)
	if err == nil {
		t.Fatalf("a write succeeded while etcd was %s", state)
	}
	if d > timeout+10*time.Second {
		t.Errorf("the write took %v to fail, more than its %v timeout", d, timeout)
	}
}

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

func faultLastLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return lines[len(lines)-1]
}

// faultNamesEtcd reports whether one of the failing /readyz checks is etcd's.
func faultNamesEtcd(failing []string) bool {
	for _, f := range failing {
		if strings.Contains(f, "etcd") {
			return true
		}
	}
	return false
}

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
