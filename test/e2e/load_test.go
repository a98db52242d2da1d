package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/edgeplane/edgeplane/internal/procfs"
)

// loadRSSBudgetMiB is the server's memory budget per resource profile
// (--profile): its RSS must stay under it while 16 clients and 100 watches
// load it, and through the hostile-input attacks. default: 600 MiB, the
// budget of issue 7. small (512 MB-1 GB boards): 400 MiB, about 30% over the
// 310 MiB peak measured under the CI load (docs/reliability/load.md).
var loadRSSBudgetMiB = map[string]int{"default": 600, "small": 400}

// loadOpKinds are the operations bench/cmd/load mixes; each must succeed.
var loadOpKinds = []string{"create", "update", "get", "list", "delete"}

// loadFull reports whether the long form (EDGEPLANE_RELIABILITY_FULL=1) runs.
func loadFull() bool { return os.Getenv("EDGEPLANE_RELIABILITY_FULL") == "1" }

// loadSummary is the part of bench/cmd/load's JSON summary the test checks.
type loadSummary struct {
	Ops []struct {
		Op      string  `json:"op"`
		Count   int     `json:"count"`
		Errors  int     `json:"errors"`
		TooMany int     `json:"too_many_requests"`
		PerSec  float64 `json:"per_sec"`
		P50ms   float64 `json:"p50_ms"`
		P99ms   float64 `json:"p99_ms"`
		Maxms   float64 `json:"max_ms"`
	} `json:"ops"`
	Total struct {
		Count  int     `json:"count"`
		Errors int     `json:"errors"`
		PerSec float64 `json:"per_sec"`
	} `json:"total"`
	Watch struct {
		Watches        int   `json:"watches"`
		Expected       int   `json:"expected"`
		Matched        int   `json:"matched"`
		Missed         int   `json:"missed"`
		Errors         int   `json:"errors"`
		Silent         []int `json:"silent"`
		WithoutWriters int   `json:"without_writers"`
		MinDelivered   int   `json:"min_delivered_per_watch"`
		Reestablished  int   `json:"reestablished"`
	} `json:"watch"`
	Server struct {
		CPUCores float64 `json:"cpu_cores"`
	} `json:"server"`
	Failures []string `json:"failures"`
	OK       bool     `json:"ok"`
}

// TestLoad runs bench/cmd/load from a second process against a real server:
// 16 clients mixing create/update/get/list/delete and 100 watches, sampling
// the server's RSS: 30 s with the default profile on SQLite, 10 s each on
// etcd and with the small profile (in the full form 5 minutes each).
func TestLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the real binary under load")
	}
	tool := loadBuildTool(t)
	// The short form runs every configuration too: 30 s on the default
	// profile on SQLite, 10 s each on etcd and on the small profile (its
	// lower in-flight limits answer 429, which the load tool retries).
	runs := []struct {
		profile, datastore string
		duration           time.Duration
	}{{"default", "sqlite", 30 * time.Second}, {"default", "etcd", 10 * time.Second}, {"small", "sqlite", 10 * time.Second}}
	for _, r := range runs {
		if loadFull() {
			r.duration = 5 * time.Minute
		}
		t.Run(r.profile+"-"+r.datastore, func(t *testing.T) {
			s := startServer(t, t.TempDir(), "--profile="+r.profile, "--datastore="+r.datastore)
			loadRun(t, s, tool, r.duration, loadRSSBudgetMiB[r.profile])
		})
	}
}

// loadBuildTool builds bench/cmd/load into a temporary directory.
func loadBuildTool(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "load")
	build := exec.Command("go", "build", "-o", out, "../../bench/cmd/load")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build bench/cmd/load: %v\n%s", err, b)
	}
	return out
}

func loadRun(t *testing.T, s *server, tool string, duration time.Duration, budgetMiB int) {
	pid := s.cmd.Process.Pid
	jsonPath := filepath.Join(t.TempDir(), "summary.json")
	rss := procfs.RSSSampler(pid, 250*time.Millisecond)
	rssStart := rss.Current()

	ctx, cancel := context.WithTimeout(context.Background(), duration+3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, tool, "--kubeconfig", s.kubeconfig, "--clients", "16", "--watches", "100",
		"--duration", duration.String(), "--namespace", "load", "--server-pid", strconv.Itoa(pid),
		"--rss-budget-mib", strconv.Itoa(budgetMiB), "--json", jsonPath)
	out, runErr := cmd.CombinedOutput()
	rssMax, rssEnd := rss.Stop()
	t.Logf("bench/cmd/load (%s):\n%s", strings.Join(cmd.Args[1:], " "), loadWithoutJSON(string(out)))
	t.Logf("server RSS sampled by the test: start %d MiB, max %d MiB, end %d MiB (budget %d MiB); at the end %s",
		rssStart>>20, rssMax>>20, rssEnd>>20, budgetMiB, loadRSSParts(pid))

	raw, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatalf("load tool wrote no summary (%v): %v\n%s", runErr, err, out)
	}
	var sum loadSummary
	if err := json.Unmarshal(raw, &sum); err != nil {
		t.Fatalf("summary: %v\n%s", err, raw)
	}
	if runErr != nil || !sum.OK {
		t.Errorf("load tool failed (%v): %s", runErr, strings.Join(sum.Failures, "; "))
	}
	// Every kind the load mixes ran, and succeeded: listed by name with its
	// count, so a kind that silently stopped (or was never sent) shows.
	counts := map[string]int{}
	for _, op := range sum.Ops {
		counts[op.Op] = op.Count
		if op.Errors > 0 {
			t.Errorf("%s: %d errors other than 429", op.Op, op.Errors)
		}
	}
	for _, kind := range loadOpKinds {
		if counts[kind] == 0 {
			t.Errorf("%s: no operation succeeded (operations that ran: %v)", kind, counts)
		}
	}
	t.Logf("operations that succeeded: %v", counts)
	w := sum.Watch
	switch {
	case w.Watches != 100:
		t.Errorf("%d watches, want 100", w.Watches)
	case w.Missed > 0 || w.Errors > 0 || len(w.Silent) > 0:
		t.Errorf("watches: %d acknowledged writes missed, %d errors, silent watches %v", w.Missed, w.Errors, w.Silent)
	case w.WithoutWriters > 0 || w.MinDelivered < 1:
		t.Errorf("%d watches had no writer and the quietest delivered %d events: every watch must be exercised", w.WithoutWriters, w.MinDelivered)
	case w.Matched != w.Expected || w.Expected == 0:
		t.Errorf("watches matched %d of %d expected deliveries", w.Matched, w.Expected)
	}
	if rssMax == 0 {
		t.Errorf("could not sample the server's RSS from /proc/%d/status", pid)
	} else if rssMax>>20 >= int64(budgetMiB) {
		t.Errorf("server RSS peaked at %d MiB, budget %d MiB", rssMax>>20, budgetMiB)
	}

	// The server is still whole: ready, alive, and serving writes.
	loadAssertHealthy(t, s)
}

// loadAssertHealthy checks that s is alive, /readyz answers 200 and a
// ConfigMap can be created and read back.
func loadAssertHealthy(t *testing.T, s *server) {
	t.Helper()
	select {
	case <-s.exited:
		t.Fatalf("edgeplane exited (%v):\n%s", s.exitErr, tail(s.output.String()))
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	body, err := s.client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	if err != nil || string(body) != "ok" {
		t.Fatalf("/readyz: %v %q", err, body)
	}
	name := fmt.Sprintf("health-%d", time.Now().UnixNano())
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"k": "v"}}
	if _, err := s.client.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create after the run: %v", err)
	}
	got, err := s.client.CoreV1().ConfigMaps("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil || got.Data["k"] != "v" {
		t.Fatalf("get after the run: %v %v", err, got)
	}
}

// loadRSSParts is the anonymous/file/shmem split of the RSS (file-backed
// pages are mostly the datastore's mmap: bbolt for etcd, SQLite's shm).
func loadRSSParts(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return err.Error()
	}
	var parts []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "Rss") {
			parts = append(parts, strings.Join(strings.Fields(line), " "))
		}
	}
	return strings.Join(parts, ", ")
}

// loadWithoutJSON drops the tool's one-line JSON summary from its output.
func loadWithoutJSON(out string) string {
	var keep []string
	for _, line := range strings.Split(out, "\n") {
		if !strings.HasPrefix(line, "JSON ") {
			keep = append(keep, line)
		}
	}
	return strings.Join(keep, "\n")
}
