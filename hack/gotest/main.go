// Command gotest runs `go test -json` with its arguments and prints what a
// reader of `make test` needs: each package's result line, the whole output
// of every failed test (and of tests still running when a package failed, a
// timeout), build errors, and at the end the slowest tests, every skipped
// test with its reason and the list of failed tests.
//
//	go run ./hack/gotest -count=1 -timeout 40m ./...
//	go run ./hack/gotest -first=./test/e2e -count=1 -timeout 40m ./...
//
// -first=PATTERN (before go test's arguments) starts the packages PATTERN
// names at once, in a go test of their own, and the other packages of the
// arguments' patterns beside it at a lower CPU priority (nice 10): a
// package that takes longer than all the others together (test/e2e) then
// starts first instead of after them, and its tests keep the CPU first.
// The arguments' package patterns are those that begin with "." (./...,
// ./pkg/x).
//
// Under CI (internal/testing/testenv.CI) a skip is a test that never ran,
// so the run fails on any skip that is not by design: not made by
// testenv.SkipByDesign with a name that testenv.ByDesign lists. The exit
// status is go test's when it failed, else 1 for such skips, else 0.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/edgeplane/edgeplane/internal/testing/testenv"
)

// restNice is the niceness of the go test beside -first's.
const restNice = 10

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	args := os.Args[1:]
	var first string
	if len(args) > 0 {
		if v, ok := strings.CutPrefix(args[0], "-first="); ok {
			first, args = v, args[1:]
		}
	}
	runs, err := plan(ctx, first, args)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gotest:", err)
		os.Exit(2)
	}
	r := newReport(os.Stdout, testenv.CI())
	code := r.finish(runAll(ctx, r, runs))
	os.Exit(code)
}

// run is one go test: its arguments and niceness.
type run struct {
	args []string
	nice int
}

// plan splits the arguments into the go tests to run: one, or with first
// the packages it names and, beside them, the others.
func plan(ctx context.Context, first string, args []string) ([]run, error) {
	if first == "" {
		return []run{{args: args}}, nil
	}
	var flags, patterns []string
	for _, a := range args {
		if strings.HasPrefix(a, ".") {
			patterns = append(patterns, a)
		} else {
			flags = append(flags, a)
		}
	}
	firstPkgs, err := list(ctx, first)
	if err != nil {
		return nil, err
	}
	if len(firstPkgs) == 0 {
		return nil, fmt.Errorf("-first=%s names no package", first)
	}
	all, err := list(ctx, patterns...)
	if err != nil {
		return nil, err
	}
	rest := slices.DeleteFunc(all, func(p string) bool { return slices.Contains(firstPkgs, p) })
	runs := []run{{args: append(slices.Clone(flags), firstPkgs...)}}
	if len(rest) > 0 {
		runs = append(runs, run{args: append(slices.Clone(flags), rest...), nice: restNice})
	}
	return runs, nil
}

// list returns the import paths of the packages patterns name.
func list(ctx context.Context, patterns ...string) ([]string, error) {
	out, err := exec.CommandContext(ctx, "go", append([]string{"list"}, patterns...)...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return nil, fmt.Errorf("go list %s: %v\n%s", strings.Join(patterns, " "), err, ee.Stderr)
		}
		return nil, fmt.Errorf("go list %s: %w", strings.Join(patterns, " "), err)
	}
	return strings.Fields(string(out)), nil
}

// runAll runs the go tests side by side, feeding their events to r one
// line at a time, and returns the first failure of either (nil if both
// passed).
func runAll(ctx context.Context, r *report, runs []run) error {
	lines := make(chan []byte)
	errs := make([]error, len(runs))
	var wg sync.WaitGroup
	for i, rn := range runs {
		argv := append([]string{"go", "test", "-json"}, rn.args...)
		if rn.nice > 0 {
			argv = append([]string{"nice", "-n", fmt.Sprint(rn.nice)}, argv...)
		}
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		// On ^C or SIGTERM go test gets SIGINT, so that it stops its test
		// binaries and reports what ran, rather than being killed.
		cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
		cmd.Stderr = os.Stderr
		stdout, err := cmd.StdoutPipe()
		if err == nil {
			err = cmd.Start()
		}
		if err != nil {
			errs[i] = err
			continue
		}
		wg.Go(func() {
			readErr := forward(stdout, lines)
			errs[i] = cmd.Wait()
			if readErr != nil {
				fmt.Fprintln(os.Stderr, "gotest: reading go test -json:", readErr)
				if errs[i] == nil {
					errs[i] = readErr
				}
			}
		})
	}
	go func() {
		wg.Wait()
		close(lines)
	}()
	for l := range lines {
		r.line(l)
	}
	return errors.Join(slices.DeleteFunc(errs, func(e error) bool { return e == nil })...)
}

// forward sends a copy of each line of in to lines.
func forward(in io.Reader, lines chan<- []byte) error {
	return scanLines(in, func(b []byte) { lines <- slices.Clone(b) })
}
