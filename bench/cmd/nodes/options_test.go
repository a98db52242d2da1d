package main

import (
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
		l.samples = append(l.samples, s)
	}
	if err := l.write(path); err != nil {
		t.Fatal(err)
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
	}{
		{"all", base, base.Add(time.Minute), ms(5, 7, 90, 3), 1, 1},
		{"window", base.Add(5 * time.Second), base.Add(35 * time.Second), ms(7, 90), 0, 1},
		{"a failure", base.Add(35 * time.Second), base.Add(45 * time.Second), nil, 1, 0},
		{"none", base.Add(time.Hour), base.Add(2 * time.Hour), nil, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readLeaseLatencies(path, tc.from, tc.to)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.ok, tc.want) || got.failed != tc.failed || got.timedOut != tc.timedOut {
				t.Errorf("got %v, %d failed, %d timed out; want %v, %d failed, %d timed out",
					got.ok, got.failed, got.timedOut, tc.want, tc.failed, tc.timedOut)
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
