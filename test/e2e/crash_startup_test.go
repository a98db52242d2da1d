package e2e

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// crashKillPoint says when to SIGKILL a starting server: once file (relative
// to the data dir) exists, else a random delay of up to spread after the log
// line containing after (after "" counts from exec; {ds} stands for the
// datastore's name).
type crashKillPoint struct {
	name   string
	files  []string // one is picked at random
	after  string
	spread time.Duration
}

var (
	// crashCertFiles are written in this order by pkg/certs on a fresh data
	// dir: each CA key, then its certificate, then the leaves and kubeconfigs.
	crashCertFiles = []string{"tls/server-ca.key", "tls/client-ca.key", "tls/front-proxy-ca.key", "tls/etcd/ca.key",
		"tls/sa.key", "tls/apiserver.crt", "tls/etcd/server.crt", "tls/admin.crt", "admin.kubeconfig"}
	crashFreshPoints = []crashKillPoint{
		{name: "mid cert generation", files: crashCertFiles},
		{name: "mid datastore init", after: `phase="certs"`, spread: 300 * time.Millisecond},
		{name: "mid apiserver bootstrap (storage initialised, RBAC and system objects being written)",
			after: `phase="{ds}"`, spread: 3 * time.Second},
	}
	crashExistingPoints = []crashKillPoint{
		{name: "random moment of a restart", spread: 4 * time.Second},
		{name: "mid controller start", after: `phase="apiserver"`, spread: 500 * time.Millisecond},
	}
	crashPhaseLine = regexp.MustCompile(`"Start-up phase done" logger="edgeplane" phase="([^"]+)"`)
)

// crashKillAttempts bounds the tries at landing a kill before ready.
const crashKillAttempts = 4

// crashKillDuringStart starts edgeplane on dir and SIGKILLs it at kp, during
// start-up: a kill that lands after the server logged ready is not one, so
// it tries again with half the spread (an earlier kill), and fails the test
// when crashKillAttempts tries all came too late (start-up got faster than
// the kill point: move it). The start must not fail on its own before that
// (the previous kill must have left a data dir it accepts); it returns what
// the kill interrupted.
func crashKillDuringStart(t *testing.T, dir, ds string, kp crashKillPoint, rng *rand.Rand) string {
	t.Helper()
	for attempt := 1; ; attempt++ {
		what, duringStartup := crashKillOnce(t, dir, ds, kp, rng)
		if duringStartup {
			return what
		}
		if attempt == crashKillAttempts {
			t.Errorf("%d kills at %q all landed after the server was ready (the last: %s): start-up is faster than this kill point; move it earlier",
				attempt, kp.name, what)
			return what
		}
		t.Logf("%s: landed after ready, not during start-up; again with half the spread", what)
		kp.spread /= 2
	}
}

// crashKillOnce is one start and SIGKILL at kp; it reports whether the kill
// landed before the server logged that it was ready.
func crashKillOnce(t *testing.T, dir, ds string, kp crashKillPoint, rng *rand.Rand) (string, bool) {
	t.Helper()
	begin := time.Now()
	s := launch(t, dir, "--datastore", ds)
	var file string
	if len(kp.files) > 0 {
		file = kp.files[rng.IntN(len(kp.files))]
	}
	after := strings.ReplaceAll(kp.after, "{ds}", ds)
	deadline := time.Now().Add(3 * time.Minute)
	trigger := kp.name
	if file != "" {
		trigger += " (" + file + " written)"
	}
wait:
	for {
		switch {
		case file != "":
			if _, err := os.Stat(filepath.Join(dir, file)); err == nil {
				break wait
			}
		case after == "" || strings.Contains(s.output.String(), after):
			break wait
		}
		select {
		case <-s.exited:
			t.Fatalf("start %d ms after exec: edgeplane exited on its own (%v) before %s; the data dir left by the previous SIGKILL was refused:\n%s",
				time.Since(begin).Milliseconds(), s.exitErr, trigger, tail(s.output.String()))
		case <-s.ready:
			trigger += ", reached ready first"
			break wait
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never came within 3 minutes:\n%s", trigger, tail(s.output.String()))
		}
		if file != "" {
			time.Sleep(100 * time.Microsecond)
		} else {
			time.Sleep(5 * time.Millisecond)
		}
	}
	if kp.spread > 0 {
		select {
		case <-time.After(time.Duration(rng.Int64N(int64(kp.spread)))):
		case <-s.exited:
		}
	}
	at := time.Since(begin)
	crashKill(t, s, "during start-up at "+trigger)
	// The process is gone and its output read to the end: the log says
	// whether it got to ready first.
	out := s.output.String()
	last := "none"
	if m := crashPhaseLine.FindAllStringSubmatch(out, -1); len(m) > 0 {
		last = m[len(m)-1][1]
	}
	return fmt.Sprintf("%s: SIGKILL %d ms after exec, last start-up phase done: %s", trigger, at.Milliseconds(), last), !readyLine.MatchString(out)
}

// crashMarkers writes n ConfigMaps and returns them as acknowledged.
func crashMarkers(t *testing.T, s *server, round, n int) map[string]*corev1.ConfigMap {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	acked := map[string]*corev1.ConfigMap{}
	for i := range n {
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("crash-startup-%d-%d", round, i), Labels: map[string]string{crashLabel: "startup"}},
			Data:       map[string]string{"round": fmt.Sprint(round), "i": fmt.Sprint(i)},
		}
		got, err := s.client.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create %s: %v", cm.Name, err)
		}
		acked[got.Name] = got
	}
	return acked
}

// crashCheckMarkers checks that every acknowledged ConfigMap is there as acknowledged.
func crashCheckMarkers(t *testing.T, s *server, acked map[string]*corev1.ConfigMap) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for name, want := range acked {
		got, err := s.client.CoreV1().ConfigMaps("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Errorf("acknowledged ConfigMap %s after the start-up kills: %v", name, err)
			continue
		}
		if got.ResourceVersion != want.ResourceVersion || got.UID != want.UID || !maps.Equal(got.Data, want.Data) {
			t.Errorf("%s is uid %s rv %s %v, acknowledged as uid %s rv %s %v", name, got.UID, got.ResourceVersion, got.Data, want.UID, want.ResourceVersion, want.Data)
		}
	}
}

// crashCertsCheck runs `edgeplane certs check`: every certificate present,
// parseable and valid (the server already refuses mismatched pairs).
func crashCertsCheck(t *testing.T, dir string) {
	t.Helper()
	out, err := exec.Command(binary, "certs", "check", "--data-dir", dir).CombinedOutput()
	if err != nil {
		t.Errorf("edgeplane certs check after the start-up kills: %v\n%s", err, out)
	}
	tmp, _ := filepath.Glob(filepath.Join(dir, "tls", ".*.tmp-*"))
	etcdTmp, _ := filepath.Glob(filepath.Join(dir, "tls", "etcd", ".*.tmp-*"))
	if n := len(tmp) + len(etcdTmp); n > 0 {
		t.Logf("%d temporary files of interrupted certificate writes left in %s/tls (harmless, never read)", n, dir)
	}
}

// TestCrashDuringStartup SIGKILLs the server during start-up, on a fresh data
// dir (mid cert generation, datastore init, apiserver bootstrap) and on a
// populated one; each next start must accept the data dir, the last must
// reach ready with every acknowledged object and a consistent set of certs.
func TestCrashDuringStartup(t *testing.T) {
	if testing.Short() {
		t.Skip("kills the real server during start-up")
	}
	parallelSubtests(t)
	plan := crashPlanFromEnv(t)
	rounds, fresh, existing := 1, 3, 1
	if plan.full {
		rounds, fresh, existing = 2, 3, 3
	}
	var mu sync.Mutex
	var summaries []string
	for _, ds := range datastoreCases {
		t.Run(ds, func(t *testing.T) {
			parallel(t, 25*time.Second)
			rng := crashRand(plan.seed, crashDatastoreIndex(ds), 77)
			kills := 0
			var recoveries crashDurations
			for round := 1; round <= rounds; round++ {
				dir := t.TempDir()
				for i := range fresh {
					t.Logf("%s round %d, fresh data dir, kill %d: %s", ds, round, i+1,
						crashKillDuringStart(t, dir, ds, crashFreshPoints[i%len(crashFreshPoints)], rng))
					kills++
				}
				s, rec := crashStart(t, dir, ds)
				recoveries = append(recoveries, rec)
				acked := crashMarkers(t, s, round, 10)
				crashKill(t, s, "after the markers were acknowledged")
				for i := range existing {
					t.Logf("%s round %d, populated data dir, kill %d: %s", ds, round, i+1,
						crashKillDuringStart(t, dir, ds, crashExistingPoints[i%len(crashExistingPoints)], rng))
					kills++
				}
				s, rec = crashStart(t, dir, ds)
				recoveries = append(recoveries, rec)
				crashCheckMarkers(t, s, acked)
				s.stop()
				crashCertsCheck(t, dir)
			}
			mu.Lock()
			summaries = append(summaries, fmt.Sprintf("crash start-up summary %s: seed %d, %d SIGKILLs during start-up in %d rounds, every next start accepted the data dir; start to ready after them %s",
				ds, plan.seed, kills, rounds, recoveries))
			mu.Unlock()
		})
	}
	t.Cleanup(func() {
		for _, s := range summaries {
			t.Log(s)
		}
	})
}
