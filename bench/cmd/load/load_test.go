package main

import (
	"strings"
	"testing"
	"time"
)

func TestParseMix(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    map[string]int
		wantErr string
	}{
		{in: "create=1,get=3", want: map[string]int{"create": 1, "get": 3}},
		{in: " create=2 , update=0 ,", want: map[string]int{"create": 2, "update": 0}},
		{in: "create=1,create=2", want: map[string]int{"create": 3}},
		{in: "watch=1", wantErr: "unknown operation"},
		{in: "create", wantErr: "not op=weight"},
		{in: "create=-1", wantErr: "non-negative"},
		{in: "create=0", wantErr: "all weights are zero"},
	} {
		got, err := parseMix(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("parseMix(%q) error %v, want %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("parseMix(%q): %v", tc.in, err)
			continue
		}
		for op, w := range tc.want {
			if got[op] != w {
				t.Errorf("parseMix(%q)[%s] = %d, want %d", tc.in, op, got[op], w)
			}
		}
	}
}

// The ledger matches writes to events whichever arrives first, fails writes
// whose event is overdue and lets a relist resolve what it covers.
func TestWatcherLedger(t *testing.T) {
	w := &watcher{id: 1, selector: "g=1", pending: map[uint64]pendingWrite{}, early: map[uint64]time.Time{}}
	t0 := time.Now()
	w.acknowledge(10, pendingWrite{name: "a", start: t0, ack: t0.Add(5 * time.Millisecond)})
	w.event(10, t0.Add(7*time.Millisecond)) // after the ack
	w.event(11, t0.Add(8*time.Millisecond)) // before its ack
	w.acknowledge(11, pendingWrite{name: "b", start: t0.Add(time.Millisecond), ack: t0.Add(9 * time.Millisecond)})
	w.acknowledge(12, pendingWrite{name: "c", start: t0, ack: t0})
	w.acknowledge(13, pendingWrite{name: "d", start: t0, ack: t0})
	w.acknowledge(20, pendingWrite{name: "e", start: t0, ack: t0.Add(10 * time.Second)})

	w.sweep(t0.Add(2*time.Second), time.Second, time.Minute) // 12 and 13 are overdue, 20 is not
	if w.matched != 2 || w.missed != 2 || len(w.pending) != 1 || w.expected != 5 {
		t.Fatalf("matched %d missed %d pending %d expected %d, want 2 2 1 5", w.matched, w.missed, len(w.pending), w.expected)
	}
	if w.delivery[0] != 7*time.Millisecond || w.delivery[1] != 7*time.Millisecond {
		t.Errorf("delivery %v, want [7ms 7ms] (from each write's start)", w.delivery)
	}
	if len(w.messages) != 2 || !strings.Contains(w.messages[0], "no event for") {
		t.Errorf("messages %q", w.messages)
	}
	w.relisted(19)
	if len(w.pending) != 1 || w.resolved != 0 {
		t.Errorf("a list at 19 resolved the write at 20")
	}
	w.relisted(20)
	if len(w.pending) != 0 || w.resolved != 1 || w.relists != 2 {
		t.Errorf("pending %d resolved %d relists %d after a list at 20", len(w.pending), w.resolved, w.relists)
	}
	w.event(30, t0)
	w.sweep(t0.Add(2*time.Minute), time.Second, time.Minute)
	if len(w.early) != 0 {
		t.Errorf("an unmatched event older than keep was not forgotten")
	}
}

func TestWatchSetCoversEveryGroup(t *testing.T) {
	o := &options{watches: 100, groups: 10, nsWatchEvery: 25}
	ws := newWatchSet(o, "run")
	nsWide := 0
	for _, w := range ws.all {
		if w.selector == "" {
			nsWide++
		}
	}
	if nsWide != 4 {
		t.Errorf("%d namespace-wide watches, want 4", nsWide)
	}
	total := 0
	for g := 0; g < 10; g++ {
		name := "g" + string(rune('0'+g))
		// The 96 group watches spread over 10 groups, plus the 4 namespace-wide ones.
		n := len(ws.byGroup[name])
		if n < 12 || n > 14 {
			t.Errorf("group %s reaches %d watches, want 12 to 14", name, n)
		}
		total += n - nsWide
	}
	if total != 96 {
		t.Errorf("group watches cover %d, want 96", total)
	}
}

func TestQuantiles(t *testing.T) {
	var lat []time.Duration
	for i := 100; i >= 1; i-- {
		lat = append(lat, time.Duration(i)*time.Millisecond)
	}
	var s opSummary
	quantiles(&s, lat, 10*time.Second)
	if s.Count != 100 || s.PerSec != 10 || s.P50ms != 51 || s.P99ms != 100 || s.Maxms != 100 {
		t.Errorf("got %+v", s)
	}
}
