// Command gotest runs `go test -json` with its arguments and prints what a
// reader of `make test` needs: each package's result line, the whole output
// of every failed test (and of tests still running when a package failed, a
// timeout), build errors, and at the end every skipped test with its reason
// and the list of failed tests.
//
//	go run ./hack/gotest -count=1 -timeout 40m ./...
//
// Under CI (internal/testing/testenv.CI) a skip is a test that never ran,
// so the run fails on any skip that is not by design: not made by
// testenv.SkipByDesign with a name that testenv.ByDesign lists. The exit
// status is go test's when it failed, else 1 for such skips, else 0.
package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"github.com/edgeplane/edgeplane/internal/testing/testenv"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cmd := exec.CommandContext(ctx, "go", append([]string{"test", "-json"}, os.Args[1:]...)...)
	// On ^C or SIGTERM go test gets SIGINT, so that it stops its test
	// binaries and reports what ran, rather than being killed.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gotest:", err)
		os.Exit(2)
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "gotest:", err)
		os.Exit(2)
	}
	r := newReport(os.Stdout, testenv.CI())
	readErr := r.read(stdout)
	waitErr := cmd.Wait()
	if readErr != nil {
		fmt.Fprintln(os.Stderr, "gotest: reading go test -json:", readErr)
	}
	code := r.finish(waitErr)
	if readErr != nil && code == 0 {
		code = 2
	}
	os.Exit(code)
}
