// Command goroutines groups the goroutines of a debug=2 goroutine dump (the
// goroutine-<d>.txt edgeplane-prof writes, or /debug/pprof/goroutine?debug=2)
// by the function that created each one and by the first frame of its stack
// outside the runtime, and prints the largest groups:
//
//	go run ./bench/cmd/goroutines -top 25 /tmp/p/goroutine-90s.txt
//	go run ./bench/cmd/goroutines -by creator /tmp/p/goroutine-90s.txt
//	go run ./bench/cmd/goroutines -diff /tmp/before/goroutine-90s.txt /tmp/after/goroutine-90s.txt
//
// -by is creator, frame, or both (the default: one group per creator and
// first frame). With -diff it prints each group's count in both dumps and the
// change, largest first.
package main

import (
	"bufio"
	"cmp"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
)

func main() {
	top := flag.Int("top", 25, "groups to print")
	by := flag.String("by", "both", "group by: creator, frame or both")
	diff := flag.Bool("diff", false, "compare two dumps: before after")
	flag.Parse()
	if *by != "creator" && *by != "frame" && *by != "both" {
		fail(fmt.Errorf("-by %q: want creator, frame or both", *by))
	}
	want := 1
	if *diff {
		want = 2
	}
	if flag.NArg() != want {
		fail(fmt.Errorf("want %d dump file(s), got %d", want, flag.NArg()))
	}
	counts := make([]map[string]int, want)
	totals := make([]int, want)
	for i := range want {
		f, err := os.Open(flag.Arg(i))
		if err != nil {
			fail(err)
		}
		gs, err := parse(f)
		f.Close()
		if err != nil {
			fail(fmt.Errorf("%s: %w", flag.Arg(i), err))
		}
		counts[i], totals[i] = group(gs, *by), len(gs)
	}
	if !*diff {
		fmt.Printf("%d goroutines\n\n| goroutines | group |\n|---:|---|\n", totals[0])
		for _, k := range largest(counts[0], func(k string) int { return counts[0][k] }, *top) {
			fmt.Printf("| %d | %s |\n", counts[0][k], k)
		}
		return
	}
	fmt.Printf("%d -> %d goroutines\n\n| before | after | change | group |\n|---:|---:|---:|---|\n", totals[0], totals[1])
	all := map[string]int{}
	for _, c := range counts {
		for k := range c {
			all[k] = 0
		}
	}
	for _, k := range largest(all, func(k string) int { return abs(counts[1][k] - counts[0][k]) }, *top) {
		fmt.Printf("| %d | %d | %+d | %s |\n", counts[0][k], counts[1][k], counts[1][k]-counts[0][k], k)
	}
}

// goroutine is one goroutine of a dump: who created it and its first frame
// outside the runtime.
type goroutine struct{ creator, frame string }

var (
	header = regexp.MustCompile(`^goroutine \d+ \[`)
	// A frame line is a function followed by its arguments: "pkg.F(0x1, ...)".
	args = regexp.MustCompile(`\((?:0x|\.\.\.|\{|\)|_).*$`)
)

// runtimeFrames are the prefixes of frames that say where a goroutine waits,
// not what it is.
var runtimeFrames = []string{"runtime.", "internal/", "sync.", "time.Sleep", "syscall."}

func parse(r io.Reader) ([]goroutine, error) {
	var out []goroutine
	var cur *goroutine
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case header.MatchString(line):
			out = append(out, goroutine{creator: "(none)"})
			cur = &out[len(out)-1]
		case cur == nil || line == "" || strings.HasPrefix(line, "\t"):
		case strings.HasPrefix(line, "created by "):
			c := strings.TrimPrefix(line, "created by ")
			c, _, _ = strings.Cut(c, " in goroutine ")
			cur.creator = c
		default:
			fn := args.ReplaceAllString(line, "")
			if cur.frame == "" && !hasAnyPrefix(fn, runtimeFrames) {
				cur.frame = fn
			}
		}
	}
	if len(out) == 0 && sc.Err() == nil {
		return nil, fmt.Errorf("no goroutines: not a debug=2 dump?")
	}
	return out, sc.Err()
}

func group(gs []goroutine, by string) map[string]int {
	c := map[string]int{}
	for _, g := range gs {
		frame := cmp.Or(g.frame, "(runtime only)")
		switch by {
		case "creator":
			c[g.creator]++
		case "frame":
			c[frame]++
		default:
			c[g.creator+" → "+frame]++
		}
	}
	return c
}

func largest(m map[string]int, size func(string) int, n int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int { return cmp.Or(size(b)-size(a), strings.Compare(a, b)) })
	return keys[:min(n, len(keys))]
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

func abs(n int) int { return max(n, -n) }

func fail(err error) {
	fmt.Fprintln(os.Stderr, "goroutines:", err)
	os.Exit(2)
}
