package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
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
