package gcpacer

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

const mib = 1 << 20

func TestStep(t *testing.T) {
	cfg := Config{BasePercent: 50, BurstHeap: 356 * mib, CalmSamples: 3}
	// At 100 MiB live and GOGC 50, a GC starts every 50 MiB: busy means
	// more than 50 MiB per 2 s, i.e. more than 6.25 MiB per 250 ms sample.
	idle := sample{allocated: 1 * mib, live: 100 * mib, heap: 165 * mib, elapsed: 250 * time.Millisecond}
	fast := sample{allocated: 30 * mib, live: 100 * mib, heap: 200 * mib, elapsed: 250 * time.Millisecond}
	// The base goal is 150 MiB; the runtime itself returns memory down to 10% over it.
	grown := sample{allocated: 1 * mib, live: 100 * mib, heap: 166 * mib, elapsed: 250 * time.Millisecond}
	for _, tc := range []struct {
		name    string
		cfg     Config
		samples []sample
		want    []action
	}{
		{"idle: nothing changes", cfg,
			[]sample{idle, idle, idle},
			[]action{{}, {}, {}}},
		{"just under the busy rate", cfg,
			[]sample{{allocated: 6 * mib, live: 100 * mib, elapsed: 250 * time.Millisecond}},
			[]action{{}}},
		{"a burst raises the percent to reach BurstHeap, calm samples end it", cfg,
			[]sample{fast, fast, idle, idle, idle, idle},
			[]action{{setPercent: 256}, {}, {}, {}, {setPercent: 50}, {}}},
		{"a burst that grew the heap past the base goal and its slack ends in a collection", cfg,
			[]sample{fast, grown, grown, grown},
			[]action{{setPercent: 256}, {}, {}, {setPercent: 50, collect: true}}},
		{"a busy sample during the calm starts the count again", cfg,
			[]sample{fast, idle, idle, fast, idle, idle, idle},
			[]action{{setPercent: 256}, {}, {}, {}, {}, {}, {setPercent: 50}}},
		{"the percent falls at once as the live heap grows", cfg,
			[]sample{fast, {allocated: 40 * mib, live: 105 * mib, elapsed: 250 * time.Millisecond},
				{allocated: 40 * mib, live: 128 * mib, elapsed: 250 * time.Millisecond}},
			[]action{{setPercent: 256}, {setPercent: 239}, {setPercent: 178}}},
		{"a small live heap is capped at MaxPercent", cfg,
			[]sample{{allocated: 30 * mib, live: 20 * mib, elapsed: 250 * time.Millisecond}},
			[]action{{setPercent: DefaultMaxPercent}}},
		{"a ceiling below the base goal keeps the base percent", Config{BasePercent: 50, BurstHeap: 140 * mib},
			[]sample{fast, fast},
			[]action{{}, {}}},
		{"the RSS ceiling leaves room for 50 MiB more heap", Config{BasePercent: 50, BurstHeap: 356 * mib, RSSCeiling: 500 * mib},
			[]sample{{allocated: 30 * mib, live: 100 * mib, heap: 150 * mib, rss: 450 * mib, elapsed: 250 * time.Millisecond}},
			[]action{{setPercent: 100}}},
		{"a process at the RSS ceiling keeps the base percent", Config{BasePercent: 50, BurstHeap: 356 * mib, RSSCeiling: 500 * mib},
			[]sample{{allocated: 30 * mib, live: 100 * mib, heap: 150 * mib, rss: 520 * mib, elapsed: 250 * time.Millisecond}},
			[]action{{}}},
		{"RSS unknown: BurstHeap alone", Config{BasePercent: 50, BurstHeap: 356 * mib, RSSCeiling: 500 * mib},
			[]sample{fast},
			[]action{{setPercent: 256}}},
		{"at the RSS ceiling the heap stops growing, down to the base goal", Config{BasePercent: 50, BurstHeap: 356 * mib, RSSCeiling: 500 * mib},
			[]sample{{allocated: 30 * mib, live: 100 * mib, heap: 150 * mib, rss: 300 * mib, elapsed: 250 * time.Millisecond},
				{allocated: 30 * mib, live: 100 * mib, heap: 300 * mib, rss: 520 * mib, elapsed: 250 * time.Millisecond},
				{allocated: 30 * mib, live: 100 * mib, heap: 140 * mib, rss: 520 * mib, elapsed: 250 * time.Millisecond}},
			[]action{{setPercent: 250}, {setPercent: 200}, {setPercent: 50, atCeiling: true}}},
		{"a live heap above the ceiling keeps the base percent", cfg,
			[]sample{{allocated: 400 * mib, live: 400 * mib, elapsed: 250 * time.Millisecond}},
			[]action{{}}},
		{"a slow tick is judged by its rate, not its bytes", cfg,
			[]sample{{allocated: 30 * mib, live: 100 * mib, elapsed: 5 * time.Second}},
			[]action{{}}},
		{"no heap measured yet", cfg,
			[]sample{{allocated: 30 * mib, live: 0, elapsed: 250 * time.Millisecond}},
			[]action{{}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPacer(tc.cfg)
			for i, s := range tc.samples {
				if got := p.step(s); got != tc.want[i] {
					t.Fatalf("sample %d (%+v): got %+v, want %+v", i, s, got, tc.want[i])
				}
			}
		})
	}
}

// TestRunFollowsAllocation runs the pacer on this test process: it raises the
// GC percent while the test allocates fast and puts it back once it stops.
func TestRunFollowsAllocation(t *testing.T) {
	const base = 50
	old := debug.SetGCPercent(base)
	t.Cleanup(func() { debug.SetGCPercent(old) })

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		Run(ctx, Config{BasePercent: base, BurstHeap: 1 << 40, Interval: 20 * time.Millisecond, CalmSamples: 5})
	}()
	defer func() { cancel(); <-done }()

	gogc := func() int64 {
		s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
		metrics.Read(s)
		return int64(s[0].Value.Uint64())
	}
	waitFor := func(what string, cond func() bool, work func()) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: GC percent still %d after 10 s", what, gogc())
			}
			work()
		}
	}
	var sink [][]byte
	allocate := func() { // ~64 MiB in 1 MiB objects, most of it garbage at once
		for range 64 {
			sink = append(sink, make([]byte, mib))
			if len(sink) > 8 {
				sink = sink[1:]
			}
		}
		time.Sleep(time.Millisecond)
	}
	waitFor("while allocating fast", func() bool { return gogc() == DefaultMaxPercent }, allocate)
	sink = nil
	waitFor("after the allocation stopped", func() bool { return gogc() == base }, func() { time.Sleep(10 * time.Millisecond) })

	// Stopping during a burst puts the base percent back.
	waitFor("allocating again", func() bool { return gogc() == DefaultMaxPercent }, allocate)
	sink = nil
	cancel()
	<-done
	if got := gogc(); got != base {
		t.Fatalf("after Run returned during a burst: GC percent %d, want %d", got, base)
	}
}

func TestRunOff(t *testing.T) {
	for _, cfg := range []Config{{BasePercent: 50}, {BurstHeap: mib}} {
		done := make(chan struct{})
		go func() { Run(context.Background(), cfg); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("Run(%+v) did not return at once: it should be off", cfg)
		}
	}
}
