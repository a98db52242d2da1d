package main

import (
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseOptions(t *testing.T) {
	dir := t.TempDir()
	withToken := filepath.Join(dir, "with-token")
	if err := os.MkdirAll(withToken, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(withToken, "node-token"), []byte("abcdef.0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		args    []string
		wantErr string // empty: no error
		check   func(*testing.T, *driverOptions)
	}{
		{name: "data dir gives token and kubeconfig", args: []string{"-data-dir", withToken, "-pids", "1, 2"},
			check: func(t *testing.T, o *driverOptions) {
				if o.token != "abcdef.0123456789abcdef" || o.kubeconfig != filepath.Join(withToken, "admin.kubeconfig") {
					t.Errorf("token %q kubeconfig %q", o.token, o.kubeconfig)
				}
				if len(o.pids) != 2 || o.pids[0] != 1 || o.pids[1] != 2 {
					t.Errorf("pids %v", o.pids)
				}
			}},
		{name: "server not up", args: []string{"-data-dir", dir}, wantErr: "is the server up?"},
		{name: "nothing to join", args: nil, wantErr: "give -data-dir, or -kubeconfig and -token"},
		{name: "bad pid", args: []string{"-data-dir", withToken, "-pids", "x"}, wantErr: `-pids: "x" is not a process id`},
		{name: "too many hollow nodes", args: []string{"-data-dir", withToken, "-n", "5000"}, wantErr: "-n 5000: want 1..1000 hollow nodes"},
		{name: "lite nodes go further", args: []string{"-data-dir", withToken, "-sim", "lite", "-n", "5000"},
			check: func(t *testing.T, o *driverOptions) {
				if o.sim != simLite || o.prefix != "lite" || o.startEvery != 50*time.Millisecond {
					t.Errorf("sim %q prefix %q start-every %s, want lite, lite, 50ms", o.sim, o.prefix, o.startEvery)
				}
			}},
		{name: "too many lite nodes", args: []string{"-data-dir", withToken, "-sim", "lite", "-n", "5001"}, wantErr: "-n 5001: want 1..5000 lite nodes"},
		{name: "auto: hollow up to 100", args: []string{"-data-dir", withToken, "-sim", "auto", "-n", "100", "-prefix", "x"},
			check: func(t *testing.T, o *driverOptions) {
				if o.sim != simHollow || o.prefix != "x" || o.startEvery != 200*time.Millisecond {
					t.Errorf("sim %q prefix %q start-every %s, want hollow, x, 200ms", o.sim, o.prefix, o.startEvery)
				}
			}},
		{name: "auto: lite above", args: []string{"-data-dir", withToken, "-sim", "auto", "-n", "101", "-start-every", "1s"},
			check: func(t *testing.T, o *driverOptions) {
				if o.sim != simLite || o.startEvery != time.Second {
					t.Errorf("sim %q start-every %s, want lite, 1s (given)", o.sim, o.startEvery)
				}
			}},
		{name: "unknown simulator", args: []string{"-data-dir", withToken, "-sim", "kwok"}, wantErr: `-sim "kwok": want hollow, lite or auto`},
		{name: "too many pods", args: []string{"-data-dir", withToken, "-pods-per-node", "200"}, wantErr: "-pods-per-node 200"},
		{name: "short window", args: []string{"-data-dir", withToken, "-duration", "1s"}, wantErr: "-duration 1s: want 10s..24h"},
		{name: "every problem at once", args: []string{"-data-dir", withToken, "-n", "0", "-churn", "-1", "-list-burst", "65"},
			wantErr: "-n 0: want at least 1; -churn must not be negative; -list-burst 65: want 0..64 clients"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parseOptions(tc.args)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, o)
		})
	}
}

func TestLeaseLatencyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), leaseLatencyFile)
	l := &leaseLatency{}
	base := time.Unix(1_800_000_000, 0)
	for i, s := range []latencySample{
		{d: 5 * time.Millisecond}, {d: 7 * time.Millisecond}, {d: 10 * time.Second, outcome: renewTimedOut},
		{d: 90 * time.Millisecond}, {d: 2 * time.Millisecond, outcome: renewFailed}, {d: 3 * time.Millisecond},
	} {
		s.at = base.Add(time.Duration(i) * 10 * time.Second)
		s.node = "n1"
		l.samples = append(l.samples, s)
	}
	if err := l.write(path); err != nil {
		t.Fatal(err)
	}
	// Lines as a binary that did not name the node (or the outcome of a
	// success) wrote them still read.
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Fprintf(f, "%d 4000\n%d 6000 failed\n", base.Add(time.Minute).Unix(), base.Add(61*time.Second).Unix()); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	at := func(s ...int) map[string][]time.Time {
		out := map[string][]time.Time{}
		for _, v := range s {
			out["n1"] = append(out["n1"], base.Add(time.Duration(v)*time.Second))
		}
		if len(s) == 0 {
			return nil
		}
		return out
	}
	ms := func(n ...int) []time.Duration {
		var out []time.Duration
		for _, v := range n {
			out = append(out, time.Duration(v)*time.Millisecond)
		}
		return out
	}
	for _, tc := range []struct {
		name             string
		from, to         time.Time
		want             []time.Duration
		failed, timedOut int
		attempts         map[string][]time.Time
	}{
		{"all", base, base.Add(time.Minute), ms(5, 7, 90, 3, 4), 1, 1, at(0, 10, 20, 30, 40, 50)},
		{"window", base.Add(5 * time.Second), base.Add(35 * time.Second), ms(7, 90), 0, 1, at(10, 20, 30)},
		{"a failure", base.Add(35 * time.Second), base.Add(45 * time.Second), nil, 1, 0, at(40)},
		{"lines without node or outcome", base.Add(55 * time.Second), base.Add(2 * time.Minute), ms(4), 1, 0, nil},
		{"none", base.Add(time.Hour), base.Add(2 * time.Hour), nil, 0, 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readLeaseLatencies(path, tc.from, tc.to)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.ok, tc.want) || got.failed != tc.failed || got.timedOut != tc.timedOut ||
				!maps.EqualFunc(got.attempts, tc.attempts, slices.Equal) {
				t.Errorf("got %v, %d failed, %d timed out, attempts %v; want %v, %d failed, %d timed out, %v",
					got.ok, got.failed, got.timedOut, got.attempts, tc.want, tc.failed, tc.timedOut, tc.attempts)
			}
		})
	}
}

// TestLeaseTimer: every Lease PUT is recorded with its outcome, against a
// real HTTP server: a success, a conflict and a server error fail, a
// response slower than the client's timeout and the server's 504 time out.
// Other requests are not recorded.
func TestLeaseTimer(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Query().Get("answer") {
		case "slow":
			select {
			case <-release:
			case <-r.Context().Done():
			}
		case "conflict":
			w.WriteHeader(http.StatusConflict)
		case "error":
			w.WriteHeader(http.StatusInternalServerError)
		case "504":
			w.WriteHeader(http.StatusGatewayTimeout)
		}
	}))
	defer srv.Close()
	defer close(release)
	rec := &leaseLatency{}
	client := &http.Client{Transport: &leaseTimer{next: srv.Client().Transport, rec: rec}, Timeout: 200 * time.Millisecond}
	lease := srv.URL + "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1?answer="
	for _, tc := range []struct {
		method, url string
		want        []outcome
	}{
		{http.MethodPut, lease + "ok", []outcome{renewOK}},
		{http.MethodPut, lease + "conflict", []outcome{renewFailed}},
		{http.MethodPut, lease + "error", []outcome{renewFailed}},
		{http.MethodPut, lease + "504", []outcome{renewTimedOut}},
		{http.MethodPut, lease + "slow", []outcome{renewTimedOut}},
		{http.MethodGet, lease + "slow", nil},
		{http.MethodPut, srv.URL + "/api/v1/nodes/n1/status?answer=error", nil},
	} {
		t.Run(tc.method+" "+strings.TrimPrefix(tc.url, srv.URL), func(t *testing.T) {
			rec.samples = nil
			req, err := http.NewRequest(tc.method, tc.url, nil)
			if err != nil {
				t.Fatal(err)
			}
			if resp, err := client.Do(req); err == nil {
				resp.Body.Close()
			}
			var got []outcome
			for _, s := range rec.samples {
				got = append(got, s.outcome)
				if s.node != "n1" {
					t.Errorf("recorded for node %q, want n1 (the Lease's name)", s.node)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("recorded %v, want %v (0 ok, 1 failed, 2 timed out)", got, tc.want)
			}
		})
	}
}

func TestPercentile(t *testing.T) {
	ms := func(n int) []time.Duration {
		var d []time.Duration
		for i := n; i >= 1; i-- {
			d = append(d, time.Duration(i)*time.Millisecond)
		}
		return sortDurations(d)
	}
	for _, tc := range []struct {
		n    int
		p    float64
		want time.Duration
	}{
		{100, 50, 50 * time.Millisecond}, {100, 99, 99 * time.Millisecond}, {100, 0, time.Millisecond}, {100, 100, 100 * time.Millisecond},
		// Nearest rank: the p99 of fewer than 100 samples is their maximum.
		{3, 99, 3 * time.Millisecond}, {10, 99, 10 * time.Millisecond}, {10, 50, 5 * time.Millisecond},
		{200, 99, 198 * time.Millisecond}, {1, 50, time.Millisecond}, {0, 99, 0},
	} {
		if got := percentile(ms(tc.n), tc.p); got != tc.want {
			t.Errorf("p%v of 1..%d ms = %v, want %v", tc.p, tc.n, got, tc.want)
		}
	}
}

func TestMissedRenewals(t *testing.T) {
	from := time.Unix(1_800_000_000, 0).Add(300 * time.Millisecond)
	to := from.Add(time.Minute)
	// every: attempts at from + the seconds given (whole seconds, as the
	// files have them).
	every := func(s ...int) []time.Time {
		var out []time.Time
		for _, v := range s {
			out = append(out, from.Truncate(time.Second).Add(time.Duration(v)*time.Second))
		}
		return out
	}
	for _, tc := range []struct {
		name     string
		attempts map[string][]time.Time
		interval time.Duration
		want     int
	}{
		{"every 10 s", map[string][]time.Time{"a": every(5, 15, 25, 35, 45, 55)}, 10 * time.Second, 0},
		{"a second late or early is not missed", map[string][]time.Time{"a": every(9, 20, 29, 41, 50, 59)}, 10 * time.Second, 0},
		{"retries of a failure are attempts", map[string][]time.Time{"a": every(5, 15, 15, 15, 25, 35, 45, 55)}, 10 * time.Second, 0},
		{"one missed", map[string][]time.Time{"a": every(5, 15, 35, 45, 55)}, 10 * time.Second, 1},
		{"stopped 40 s", map[string][]time.Time{"a": every(5, 15, 55)}, 10 * time.Second, 3},
		{"none at the start", map[string][]time.Time{"a": every(35, 45, 55)}, 10 * time.Second, 3},
		{"none at the end", map[string][]time.Time{"a": every(5, 15, 25)}, 10 * time.Second, 3},
		{"each node apart, in any order", map[string][]time.Time{"a": every(55, 5, 45, 35, 25, 15), "b": every(8, 38, 48, 58)}, 10 * time.Second, 2},
		{"no attempts at all", map[string][]time.Time{"a": nil}, 10 * time.Second, 6},
		{"one late at the start is not missed", map[string][]time.Time{"a": every(14, 24, 34, 44, 54)}, 10 * time.Second, 0},
		{"a 30 s heartbeat", map[string][]time.Time{"a": every(20, 50)}, 30 * time.Second, 0},
		{"no interval", map[string][]time.Time{"a": every(5)}, 0, 0},
	} {
		if got := missedRenewals(tc.attempts, from, to, tc.interval); got != tc.want {
			t.Errorf("%s: %d missed, want %d", tc.name, got, tc.want)
		}
	}
}
