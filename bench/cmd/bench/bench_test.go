package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseSmapsRollup(t *testing.T) {
	in := `55d0c0000000-7ffd5a3fe000 ---p 00000000 00:00 0                          [rollup]
Rss:              354560 kB
Pss:              259072 kB
Pss_Dirty:        220000 kB
Pss_Anon:         219904 kB
Pss_File:          39168 kB
Pss_Shmem:             0 kB
Shared_Clean:     134000 kB
`
	m, err := parseSmapsRollup(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := memory{RSS: 354560 << 10, PSS: 259072 << 10, PSSAnon: 219904 << 10, PSSFile: 39168 << 10}
	if m != want {
		t.Errorf("got %+v, want %+v", m, want)
	}
	if _, err := parseSmapsRollup(strings.NewReader("nothing\n")); err == nil {
		t.Error("no error without an Rss line")
	}
}

func TestPercentile(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		var d []time.Duration
		for _, x := range v {
			d = append(d, time.Duration(x)*time.Millisecond)
		}
		return d
	}
	for _, tc := range []struct {
		name string
		in   []time.Duration
		p    float64
		want time.Duration
	}{
		{"empty", nil, 50, 0},
		{"one", ms(7), 99, 7 * time.Millisecond},
		{"median odd", ms(5, 1, 3), 50, 3 * time.Millisecond},
		{"p99 of 100", ms(func() []int {
			var v []int
			for i := 1; i <= 100; i++ {
				v = append(v, i)
			}
			return v
		}()...), 99, 99 * time.Millisecond},
		{"p100", ms(1, 2, 3), 100, 3 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := percentile(tc.in, tc.p); got != tc.want {
				t.Errorf("percentile(%v, %v) = %v, want %v", tc.in, tc.p, got, tc.want)
			}
		})
	}
}

func TestParseTimeline(t *testing.T) {
	log := `I1130 06:37:52.667342    3125 component.go:64] "Start-up phase done" logger="edgeplane" phase="certs" duration="119ms"
I1130 06:37:52.667960    3125 sqlite.go:125] "Starting kine" logger="edgeplane"
I1130 06:37:56.491908    3125 component.go:64] "Start-up phase done" logger="edgeplane" phase="apiserver" duration="3.786s"
`
	p := filepath.Join(t.TempDir(), "log")
	if err := os.WriteFile(p, []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}
	got := parseTimeline(p)
	want := []phase{{"certs", "119ms"}, {"apiserver", "3.786s"}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestLineWatcher(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lw := &lineWatcher{w: f}
	lw.watchFor(readyLine)
	for _, chunk := range []string{"first line\nedgeplane re", "ady in 3.1 s\n", "later\n"} {
		if _, err := lw.Write([]byte(chunk)); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := lw.seenAt(readyLine); !ok {
		t.Error("a line split across writes was not seen")
	}
	if _, ok := lw.seenAt("missing"); ok {
		t.Error("an unwatched string was seen")
	}
}

func TestParseFlagsShort(t *testing.T) {
	o, err := parseFlags([]string{"-short", "-idle", "2m", "-configs", "upstream-etcd,edgeplane-sqlite"})
	if err != nil {
		t.Fatal(err)
	}
	if o.idle != 2*time.Minute || o.repeat != 1 || o.creates != 500 || len(o.configs) != 2 {
		t.Errorf("short defaults or overrides wrong: %+v", o)
	}
	if _, err := parseFlags([]string{"-configs", "nope"}); err == nil {
		t.Error("an unknown configuration was accepted")
	}
}

func TestTableRatios(t *testing.T) {
	rep := &report{Baseline: "upstream-etcd", Options: reportOptions{Settle: time.Minute, Creates: 10, Clients: 2, Idle: time.Minute}}
	rep.Results = []*configResult{
		{Name: "upstream-etcd", Binaries: []binary{{}, {}}, BinaryBytes: 100e6, Cold: []startSample{{Ready: 4 * time.Second}}},
		{Name: "edgeplane-sqlite", Binaries: []binary{{}}, BinaryBytes: 50e6, Cold: []startSample{{Ready: 3 * time.Second}}},
	}
	tab := rep.table()
	for _, want := range []string{"| 100.0 | 50.0 (0.50×) |", "| 4.00 | 3.00 (0.75×) |"} {
		if !strings.Contains(tab, want) {
			t.Errorf("table lacks %q:\n%s", want, tab)
		}
	}
}

func TestMedian(t *testing.T) {
	s := func(v ...float64) []startSample {
		var out []startSample
		for _, x := range v {
			out = append(out, startSample{Ready: time.Duration(x * float64(time.Second))})
		}
		return out
	}
	sec := func(x startSample) float64 { return x.Ready.Seconds() }
	for _, tc := range []struct {
		in   []startSample
		want float64
	}{{s(3), 3}, {s(4, 2), 3}, {s(5, 1, 3), 3}, {s(1, 9, 2, 4), 3}} {
		if got, ok := medianOf(tc.in, sec); !ok || got != tc.want {
			t.Errorf("median of %v = %v, want %v", tc.in, got, tc.want)
		}
	}
}

// TestMedianLoad checks that each request figure is its own median over the
// cold starts' runs.
func TestMedianLoad(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	runs := []loadResult{
		{Creates: 2000, CreatesPerS: 700, CPUPerCreate: ms(3), WatchLoadP99: ms(9), ListTimes: []time.Duration{ms(20)}},
		{Creates: 2000, CreatesPerS: 900, CPUPerCreate: ms(2), WatchLoadP99: ms(30), ListTimes: []time.Duration{ms(21)}},
		{Creates: 2000, CreatesPerS: 800, CPUPerCreate: ms(4), WatchLoadP99: ms(12), ListTimes: []time.Duration{ms(22)}},
	}
	m := medianLoad(runs)
	if m.Creates != 2000 || m.CreatesPerS != 800 || m.CPUPerCreate != ms(3) || m.WatchLoadP99 != ms(12) {
		t.Errorf("medians: %v creates, %v/s, %v CPU, watch p99 %v; want 2000, 800/s, 3ms, 12ms",
			m.Creates, m.CreatesPerS, m.CPUPerCreate, m.WatchLoadP99)
	}
	if len(m.ListTimes) != 3 {
		t.Errorf("list times %v, want all three", m.ListTimes)
	}
	if one := medianLoad(runs[:1]); one.CreatesPerS != 700 {
		t.Errorf("one run: %v/s, want 700", one.CreatesPerS)
	}
}

// TestWatchStalls checks that the slowest events are picked and put back in
// the order of their writes, and that writes acknowledged together count as
// one burst.
func TestWatchStalls(t *testing.T) {
	ev := func(acked, late int) watchSample {
		return watchSample{Acked: time.Duration(acked) * time.Millisecond, Late: time.Duration(late) * time.Millisecond}
	}
	var samples []watchSample
	for i := range 100 {
		samples = append(samples, ev(i*10, 1))
	}
	samples[70], samples[71], samples[20] = ev(700, 9), ev(701, 8), ev(200, 7)
	got := slowestEvents(samples, 0.03)
	want := []watchSample{ev(200, 7), ev(700, 9), ev(701, 8)}
	if !slices.Equal(got, want) {
		t.Errorf("slowestEvents = %v, want %v", got, want)
	}
	for _, tc := range []struct {
		name          string
		in            []watchSample
		runs, longest int
	}{
		{"none", nil, 0, 0},
		{"one", []watchSample{ev(3, 9)}, 1, 1},
		{"a burst and a single one", want, 2, 2},
		{"gap just inside", []watchSample{ev(0, 9), ev(5, 9), ev(10, 9), ev(16, 9)}, 2, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if runs, longest := stalls(tc.in, 5*time.Millisecond); runs != tc.runs || longest != tc.longest {
				t.Errorf("stalls = %d runs, longest %d; want %d, %d", runs, longest, tc.runs, tc.longest)
			}
		})
	}
}
