// Command conformance builds what make conformance runs (test/conformance)
// and prints the tables of finished runs.
//
//	conformance build -dir DIR        e2e.test, ginkgo, kubectl and the images, into DIR
//	conformance table RUNDIR...       the table of runs (DIR/runs/<datastore>-<time>)
//	conformance images                the image names the build makes
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/edgeplane/edgeplane/test/conformance"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	switch os.Args[1] {
	case "build":
		fs := flag.NewFlagSet("build", flag.ExitOnError)
		dir := fs.String("dir", "", "the cache directory to build into (required)")
		_ = fs.Parse(os.Args[2:])
		if *dir == "" {
			fmt.Fprintln(os.Stderr, "conformance build: -dir is required")
			os.Exit(2)
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		begin := time.Now()
		b := &conformance.Build{Dir: *dir, Logf: func(f string, a ...any) {
			fmt.Fprintf(os.Stderr, "[%s] %s\n", time.Since(begin).Round(time.Second), fmt.Sprintf(f, a...))
		}}
		if _, err := b.All(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "conformance build:", err)
			os.Exit(1)
		}
	case "table":
		if len(os.Args) < 3 {
			usage()
		}
		for _, run := range os.Args[2:] {
			var results []conformance.Result
			for _, p := range conformance.Phases {
				path := filepath.Join(run, p.Name, "junit_01.xml")
				if _, err := os.Stat(path); err != nil {
					continue
				}
				r, err := conformance.ReadJUnit(path)
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(1)
				}
				r.Phase = p.Name
				results = append(results, r)
			}
			fmt.Println(conformance.Table(filepath.Base(run), results))
		}
	case "images":
		for _, n := range conformance.ImageNames() {
			fmt.Println(n)
		}
	default:
		usage()
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: conformance build -dir DIR | table RUNDIR... | images")
	os.Exit(2)
}
