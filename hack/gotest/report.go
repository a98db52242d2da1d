package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/edgeplane/edgeplane/internal/testing/testenv"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action     string
	Package    string
	Test       string
	Output     string
	ImportPath string  // build-output and build-fail
	Elapsed    float64 // seconds, on a test's pass, fail and skip
}

// testID names one test of one package.
type testID struct{ pkg, test string }

func (id testID) String() string { return id.pkg + " " + id.test }

// skip is one skipped test and what it printed as its reason.
type skip struct {
	id     testID
	reason string
}

// report turns the event stream into the readable output.
type report struct {
	w  io.Writer
	ci bool

	running map[testID][]string // output of the tests that have not ended, by test
	order   []testID            // running, in start order
	skips   []skip
	failed  []testID
	pkgFail []string // packages that failed (tests, build or set-up)
	took    []took   // top-level tests that ended, with their duration
}

// took is how long one top-level test ran, from its start to its end, and
// how much of that it waited for a turn beside other tests (test/e2e's
// scheduler logs the wait: waitedLine).
type took struct {
	id              testID
	seconds, waited float64
}

// ran is the test's time less its wait for a turn.
func (d took) ran() float64 { return d.seconds - d.waited }

// waitedLine is what test/e2e's parallel helpers (parallel_test.go's hold)
// log once a test has its turn.
var waitedLine = regexp.MustCompile(`started after (\S+) waiting for its turn`)

// waited is the wait a test's output reports, in seconds (0 if none).
func waited(lines []string) float64 {
	for _, l := range lines {
		if m := waitedLine.FindStringSubmatch(l); m != nil {
			if d, err := time.ParseDuration(m[1]); err == nil {
				return d.Seconds()
			}
		}
	}
	return 0
}

// slowest is how many of the longest tests finish lists: where a long run
// spends its time, in every CI log.
const slowest = 20

func newReport(w io.Writer, ci bool) *report {
	return &report{w: w, ci: ci, running: map[testID][]string{}}
}

// read consumes the stream. A line that is not JSON (go test's own
// messages) is printed as it is.
func (r *report) read(in io.Reader) error { return scanLines(in, r.line) }

// scanLines calls each with every line of in (up to 64 MiB; the slice is
// reused for the next line).
func scanLines(in io.Reader, each func([]byte)) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		each(sc.Bytes())
	}
	return sc.Err()
}

// line takes one line of the stream.
func (r *report) line(b []byte) {
	var e event
	if err := json.Unmarshal(b, &e); err != nil || e.Action == "" {
		fmt.Fprintln(r.w, string(b))
		return
	}
	r.event(e)
}

// frameworkLine is output of the testing package about a test's progress,
// not of the test: dropped from what is printed and from skip reasons.
var frameworkLine = regexp.MustCompile(`^\s*(=== (RUN|PAUSE|CONT|NAME)|--- (PASS|SKIP))\b`)

func (r *report) event(e event) {
	id := testID{e.Package, e.Test}
	switch e.Action {
	case "build-output":
		fmt.Fprint(r.w, e.Output)
	case "build-fail":
		r.pkgFail = append(r.pkgFail, e.ImportPath)
	case "start", "pause", "cont", "bench":
	case "run":
		if _, ok := r.running[id]; !ok {
			r.order = append(r.order, id)
		}
		r.running[id] = r.running[id][:0:0]
	case "output":
		if e.Test == "" {
			// The package's own lines: "ok  \tpkg\t12.3s", "FAIL",
			// TestMain's output. The bare PASS of a passing package is noise.
			if e.Output != "PASS\n" {
				fmt.Fprint(r.w, e.Output)
			}
			return
		}
		r.running[id] = append(r.running[id], e.Output)
	case "pass":
		if e.Test != "" {
			r.timed(e)
			r.end(id)
		}
	case "skip":
		if e.Test == "" {
			return // a package without tests
		}
		r.skips = append(r.skips, skip{id: id, reason: reason(r.running[id])})
		r.end(id)
	case "fail":
		if e.Test == "" {
			r.pkgFail = append(r.pkgFail, e.Package)
			// Tests of the package that never ended: it timed out or
			// crashed while they ran. Their output says where.
			for _, open := range slices.Clone(r.order) {
				if open.pkg == e.Package {
					fmt.Fprintf(r.w, "--- DID NOT END: %s (the package failed while it ran)\n", open.test)
					r.print(r.running[open])
					r.end(open)
				}
			}
			return
		}
		r.failed = append(r.failed, id)
		r.timed(e)
		r.print(r.running[id])
		r.end(id)
	}
}

// timed records the duration of a top-level test that ended.
func (r *report) timed(e event) {
	if id := (testID{e.Package, e.Test}); !strings.Contains(e.Test, "/") {
		r.took = append(r.took, took{id, e.Elapsed, waited(r.running[id])})
	}
}

func (r *report) end(id testID) {
	delete(r.running, id)
	r.order = slices.DeleteFunc(r.order, func(o testID) bool { return o == id })
}

func (r *report) print(lines []string) {
	for _, l := range lines {
		if !frameworkLine.MatchString(l) {
			fmt.Fprint(r.w, l)
		}
	}
}

// reason is what a skipped test printed, without the testing package's
// progress lines: t.Skip's message with its file:line, and any logs before.
func reason(lines []string) string {
	var out []string
	for _, l := range lines {
		if l = strings.TrimSpace(l); l != "" && !frameworkLine.MatchString(l) {
			out = append(out, l)
		}
	}
	return strings.Join(out, " / ")
}

// byDesign matches testenv.SkipByDesign's message and captures its name.
var byDesign = regexp.MustCompile(`\bby design \(([^)]+)\): `)

// allowed says whether s is a by-design skip of testenv.ByDesign.
func (s skip) allowed() bool {
	m := byDesign.FindStringSubmatch(s.reason)
	if m == nil {
		return false
	}
	_, ok := testenv.ByDesign[m[1]]
	return ok
}

// finish prints the summary and returns the exit status; testErr is go
// test's own result.
func (r *report) finish(testErr error) int {
	if len(r.took) > 0 {
		slices.SortStableFunc(r.took, func(a, b took) int { return cmp.Compare(b.ran(), a.ran()) })
		n := min(slowest, len(r.took))
		fmt.Fprintf(r.w, "\nSlowest tests (%d of %d; the time each ran once it had its turn):\n", n, len(r.took))
		for _, d := range r.took[:n] {
			line := fmt.Sprintf("  %7.1f s  %s", d.ran(), d.id)
			if d.waited > 0 {
				line += fmt.Sprintf(" (after %.0f s waiting for its turn)", d.waited)
			}
			fmt.Fprintln(r.w, line)
		}
	}
	var bad []skip
	if len(r.skips) > 0 {
		fmt.Fprintf(r.w, "\nSkipped tests (%d):\n", len(r.skips))
		for _, s := range r.skips {
			mark := ""
			if !s.allowed() {
				mark = " [not in testenv.ByDesign]"
				bad = append(bad, s)
			}
			fmt.Fprintf(r.w, "  %s%s: %s\n", s.id, mark, s.reason)
		}
	}
	if len(r.failed) > 0 {
		fmt.Fprintf(r.w, "\nFailed tests (%d):\n", len(r.failed))
		for _, id := range r.failed {
			fmt.Fprintf(r.w, "  %s\n", id)
		}
	}
	if len(r.pkgFail) > 0 {
		fmt.Fprintf(r.w, "\nFailed packages (%d): %s\n", len(r.pkgFail), strings.Join(r.pkgFail, " "))
	}
	code := 0
	if testErr != nil {
		code = 1
		var ee *exec.ExitError
		if errors.As(testErr, &ee) && ee.ExitCode() > 0 {
			code = ee.ExitCode()
		}
		fmt.Fprintf(r.w, "\ngo test: %v\n", testErr)
	}
	if r.ci && len(bad) > 0 {
		fmt.Fprintf(r.w, "\nFAIL: %d skipped tests under CI that testenv.ByDesign does not list: a skip here is a test that never ran. "+
			"Make each run (install what it needs in .ci/run), or list it in internal/testing/testenv.ByDesign with its reason and skip it with testenv.SkipByDesign.\n", len(bad))
		if code == 0 {
			code = 1
		}
	}
	return code
}
