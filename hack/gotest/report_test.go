package main

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// stream writes events as go test -json does.
func stream(t *testing.T, events ...event) string {
	t.Helper()
	var b strings.Builder
	for _, e := range events {
		line, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	return b.String()
}

// ran is the events of a test that printed lines and ended with action.
func ran(pkg, test, action string, lines ...string) []event {
	es := []event{{Action: "run", Package: pkg, Test: test}, {Action: "output", Package: pkg, Test: test, Output: "=== RUN   " + test + "\n"}}
	for _, l := range lines {
		es = append(es, event{Action: "output", Package: pkg, Test: test, Output: l + "\n"})
	}
	verb := map[string]string{"pass": "PASS", "fail": "FAIL", "skip": "SKIP"}[action]
	es = append(es, event{Action: "output", Package: pkg, Test: test, Output: "--- " + verb + ": " + test + " (0.00s)\n"},
		event{Action: action, Package: pkg, Test: test})
	return es
}

// timed sets the duration of the test's last event (its end).
func timed(es []event, seconds float64) []event {
	es[len(es)-1].Elapsed = seconds
	return es
}

func TestReport(t *testing.T) {
	const pkg = "example.com/p"
	pkgEnd := func(action, line string) []event {
		return []event{{Action: "output", Package: pkg, Output: line + "\n"}, {Action: action, Package: pkg}}
	}
	join := func(parts ...[]event) []event {
		var all []event
		for _, p := range parts {
			all = append(all, p...)
		}
		return all
	}
	tests := []struct {
		name     string
		ci       bool
		events   []event
		testErr  error
		wantCode int
		want     []string // in the output
		notWant  []string
	}{
		{
			name:     "passing tests print the package line only",
			ci:       true,
			events:   join(ran(pkg, "TestA", "pass", "    a_test.go:1: chatter"), pkgEnd("pass", "ok  \t"+pkg+"\t0.1s")),
			want:     []string{"ok  \t" + pkg},
			notWant:  []string{"chatter", "=== RUN", "Skipped tests"},
			wantCode: 0,
		},
		{
			name: "the slowest top-level tests are listed, longest first, subtests not",
			events: join(timed(ran(pkg, "TestShort", "pass"), 1.5), timed(ran(pkg, "TestLong", "pass"), 95.25),
				timed(ran(pkg, "TestLong/sub", "pass"), 90), pkgEnd("pass", "ok  \t"+pkg+"\t97s")),
			want:     []string{"Slowest tests (2 of 2; the time each ran once it had its turn):\n     95.2 s  " + pkg + " TestLong\n      1.5 s  " + pkg + " TestShort\n"},
			notWant:  []string{"TestLong/sub"},
			wantCode: 0,
		},
		{
			name: "a test's wait for its turn is not counted as its time",
			events: join(timed(ran(pkg, "TestQueued", "pass", "    parallel_test.go:130: started after 10m0s waiting for its turn"), 630),
				timed(ran(pkg, "TestAlone", "pass"), 40), pkgEnd("pass", "ok  \t"+pkg+"\t700s")),
			want:     []string{"     40.0 s  " + pkg + " TestAlone\n     30.0 s  " + pkg + " TestQueued (after 600 s waiting for its turn)\n"},
			wantCode: 0,
		},
		{
			name:     "a failed test prints its output and is listed",
			events:   join(ran(pkg, "TestB", "fail", "    b_test.go:9: got 1, want 2"), pkgEnd("fail", "FAIL\t"+pkg+"\t0.1s")),
			testErr:  errors.New("exit status 1"),
			want:     []string{"b_test.go:9: got 1, want 2", "--- FAIL: TestB", "Failed tests (1):\n  " + pkg + " TestB"},
			wantCode: 1,
		},
		{
			name: "a skip by design is listed with its reason and allowed under CI",
			ci:   true,
			events: join(ran(pkg, "TestQEMU", "skip", "    qemu_test.go:32: by design (qemu): cross-builds linux/arm64"),
				pkgEnd("pass", "ok  \t"+pkg+"\t0.1s")),
			want:     []string{"Skipped tests (1):\n  " + pkg + " TestQEMU: qemu_test.go:32: by design (qemu): cross-builds linux/arm64\n"},
			notWant:  []string{"not in testenv.ByDesign"},
			wantCode: 0,
		},
		{
			name: "any other skip fails under CI",
			ci:   true,
			events: join(ran(pkg, "TestFigures", "skip", "    netfigures_test.go:30: set EDGEPLANE_NET_FIGURES=1"),
				pkgEnd("pass", "ok  \t"+pkg+"\t0.1s")),
			want:     []string{pkg + " TestFigures [not in testenv.ByDesign]: netfigures_test.go:30: set EDGEPLANE_NET_FIGURES=1", "FAIL: 1 skipped tests under CI"},
			wantCode: 1,
		},
		{
			name: "a by-design name that is not listed fails under CI",
			ci:   true,
			events: join(ran(pkg, "TestX", "skip", "    x_test.go:3: by design (nowhere): made up"),
				pkgEnd("pass", "ok  \t"+pkg+"\t0.1s")),
			want:     []string{"[not in testenv.ByDesign]"},
			wantCode: 1,
		},
		{
			name: "outside CI a skip is listed and passes",
			events: join(ran(pkg, "TestFigures", "skip", "    netfigures_test.go:30: set EDGEPLANE_NET_FIGURES=1"),
				pkgEnd("pass", "ok  \t"+pkg+"\t0.1s")),
			want:     []string{"Skipped tests (1):", "[not in testenv.ByDesign]"},
			notWant:  []string{"FAIL"},
			wantCode: 0,
		},
		{
			name: "a test running when its package fails (a timeout) prints its output",
			events: join([]event{{Action: "run", Package: pkg, Test: "TestSlow"},
				{Action: "output", Package: pkg, Test: "TestSlow", Output: "    slow_test.go:5: waiting for the server\n"},
				{Action: "output", Package: pkg, Output: "panic: test timed out after 1s\n"}},
				pkgEnd("fail", "FAIL\t"+pkg+"\t1.0s")),
			testErr:  errors.New("exit status 1"),
			want:     []string{"panic: test timed out", "--- DID NOT END: TestSlow", "waiting for the server", "Failed packages (1): " + pkg},
			wantCode: 1,
		},
		{
			name: "build errors are printed",
			events: []event{{Action: "build-output", ImportPath: pkg + " [" + pkg + ".test]", Output: "./a.go:3:1: syntax error\n"},
				{Action: "build-fail", ImportPath: pkg + " [" + pkg + ".test]"}},
			testErr:  errors.New("exit status 1"),
			want:     []string{"./a.go:3:1: syntax error", "Failed packages (1)"},
			wantCode: 1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			r := newReport(&out, tc.ci)
			if err := r.read(strings.NewReader(stream(t, tc.events...))); err != nil {
				t.Fatal(err)
			}
			code := r.finish(tc.testErr)
			got := out.String()
			if code != tc.wantCode {
				t.Errorf("exit code %d, want %d; output:\n%s", code, tc.wantCode, got)
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("output lacks %q:\n%s", w, got)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(got, w) {
					t.Errorf("output has %q:\n%s", w, got)
				}
			}
		})
	}
}
