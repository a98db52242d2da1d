package main

import (
	"os"
	"path/filepath"
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
	for i, d := range []time.Duration{5 * time.Millisecond, 7 * time.Millisecond, 90 * time.Millisecond, 3 * time.Millisecond} {
		l.samples = append(l.samples, latencySample{at: base.Add(time.Duration(i) * 10 * time.Second), d: d})
	}
	if err := l.write(path); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		from, to time.Time
		want     []time.Duration
	}{
		{"all", base, base.Add(time.Minute), []time.Duration{5 * time.Millisecond, 7 * time.Millisecond, 90 * time.Millisecond, 3 * time.Millisecond}},
		{"window", base.Add(5 * time.Second), base.Add(25 * time.Second), []time.Duration{7 * time.Millisecond, 90 * time.Millisecond}},
		{"none", base.Add(time.Hour), base.Add(2 * time.Hour), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readLeaseLatencies(path, tc.from, tc.to)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("sample %d: %v, want %v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

func TestPercentile(t *testing.T) {
	var d []time.Duration
	for i := 100; i >= 1; i-- {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	d = sortDurations(d)
	for _, tc := range []struct {
		p    float64
		want time.Duration
	}{{50, 50 * time.Millisecond}, {99, 99 * time.Millisecond}, {0, time.Millisecond}, {100, 100 * time.Millisecond}} {
		if got := percentile(d, tc.p); got != tc.want {
			t.Errorf("p%v = %v, want %v", tc.p, got, tc.want)
		}
	}
	if got := percentile(nil, 99); got != 0 {
		t.Errorf("p99 of nothing = %v, want 0", got)
	}
}
