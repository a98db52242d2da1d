package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"
)

// TestResultRow: a result line shows the counts it has and "?" for the ones
// it was written without, so that every line of bench/nodes-results*.jsonl
// still reads; a line read back from its JSON shows what it did when made.
func TestResultRow(t *testing.T) {
	counted := result{
		Label: "edgeplane-sqlite-small", Sim: simHollow, Nodes: 20, PodsPerNode: 10, ChurnPerMin: 60,
		ChurnDone: 117, ChurnPerMinDone: 58.5, ChurnErrors: 2, ChurnCreateErrors: ptr.To(3),
		LeasePUTs: 240, LeaseFailed: 4, LeaseTimedOut: 1, LeaseMissed: ptr.To(2), LeaseP50ms: 6.5, LeaseP99ms: 40,
		Lists: 4, ListErrors: 1, ListP50ms: 21, ListP99ms: 30, FailuresCounted: true,
	}
	counted.setNotReady(notReadyCounts{nodes: 2, durations: []time.Duration{1500 * time.Millisecond, 250 * time.Millisecond, 40 * time.Second}})
	noDurations := counted
	noDurations.NotReadySeconds, noDurations.NotReadyLongestSec, noDurations.NotReadyTotalSec, noDurations.ChurnCreateErrors, noDurations.LeaseMissed = nil, 0, 0, nil, nil
	allReady := counted
	allReady.setNotReady(notReadyCounts{})
	for _, tc := range []struct {
		name string
		line string // a JSON line as -out writes it
		want []string
	}{
		{"counted, with NotReady durations", jsonLine(t, counted), []string{
			"| 60 (58.5; 2, 3) |", "| 6.5 / 40.0 (240; 4, 1; 2) |", "| 21 / 30 (4; 1) |", "| 2 (3; 40.0 / 41.8 s) |",
		}},
		{"counted, without durations, create errors and missed renewals", jsonLine(t, noDurations), []string{
			"| 60 (58.5; 2, ?) |", "| 6.5 / 40.0 (240; 4, 1; ?) |", "| 2 (3; ? / ? s) |",
		}},
		{"counted, never NotReady", jsonLine(t, allReady), []string{"| 0 (0) |"}},
		{"written before the counts", `{"label":"edgeplane-sqlite-small","nodes":10,"podsPerNode":10,"churnPerMin":30,"leasePUTs":180,"leaseP50ms":7.601,"leaseP99ms":115.132,"listPodsP50ms":21.33,"listPodsP99ms":24.156,"falseNotReady":0}`,
			[]string{"| hollow |", "| 30 |", "| 7.6 / 115.1 (180; ?) |", "| 21 / 24 (?) |", "| 0 (10 s samples) |"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r result
			if err := json.Unmarshal([]byte(tc.line), &r); err != nil {
				t.Fatal(err)
			}
			row := r.row()
			if got, want := strings.Count(row, "|"), strings.Count(strings.SplitN(tableHeader, "\n", 2)[0], "|"); got != want {
				t.Errorf("row has %d cells' bars, the header %d: %s", got, want, row)
			}
			for _, w := range tc.want {
				if !strings.Contains(row, w) {
					t.Errorf("row %s\nlacks %q", row, w)
				}
			}
		})
	}
	if got := counted.NotReadySeconds; len(got) != 3 || got[0] != 1.5 || got[1] != 0.25 || got[2] != 40 {
		t.Errorf("NotReady seconds %v, want [1.5 0.25 40]", got)
	}
}

// TestTableOfOldFiles: `nodes -table` reads every result file in bench/,
// one row per line.
func TestTableOfOldFiles(t *testing.T) {
	files, err := filepath.Glob("../../nodes-results*.jsonl")
	if err != nil || len(files) == 0 {
		t.Fatalf("no bench/nodes-results*.jsonl: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var out strings.Builder
			if err := printTable(&out, f); err != nil {
				t.Fatal(err)
			}
			lines := 0
			for _, l := range strings.Split(string(b), "\n") {
				if strings.TrimSpace(l) != "" {
					lines++
				}
			}
			if rows := strings.Count(out.String(), "\n") - 2; rows != lines {
				t.Errorf("%d rows for %d lines:\n%s", rows, lines, out.String())
			}
		})
	}
}

func jsonLine(t *testing.T, r result) string {
	t.Helper()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
