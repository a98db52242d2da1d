// Command whydead reads the Go linker's -dumpdep output and prints why
// dead-code elimination of methods is off: the chain from the program's
// entry to each function that looks up a method by reflection with a name
// the compiler cannot see (the linker's REFLECTMETHOD flag: text/template's
// field evaluation, reflect.Value.Method callers). Once one such function is
// reachable, the linker keeps every exported method of every reachable type.
//
//	CGO_ENABLED=0 go build -ldflags=-dumpdep -o /dev/null ./cmd/edgeplane 2>&1 | go run ./hack/whydead
//
// or `make deadcode`. Only functions reached by a call are reported: a
// flagged method reached through its type's method table is kept because
// methods are kept, not the cause. -dumpdep prints the first path the linker
// found to each symbol; after removing a cause, build again to see the next.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

const flagReflect = "<ReflectMethod>"

type graph struct {
	parent  map[string]string
	reflect []string // flagged symbols, in the order the linker reached them
}

// read parses "from -> to" lines; a symbol's flags follow its name.
func read(r io.Reader) (*graph, error) {
	g := &graph{parent: map[string]string{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		from, to, ok := strings.Cut(sc.Text(), " -> ")
		if !ok {
			continue
		}
		fromName, _ := split(from)
		toName, flags := split(to)
		if _, seen := g.parent[toName]; seen {
			continue
		}
		g.parent[toName] = fromName
		if strings.Contains(flags, flagReflect) {
			g.reflect = append(g.reflect, toName)
		}
	}
	return g, sc.Err()
}

// split separates a symbol's name from its " <Flag><Flag>" suffix.
func split(s string) (name, flags string) {
	if i := strings.LastIndex(s, " <"); i >= 0 && strings.HasSuffix(s, ">") {
		return s[:i], s[i+1:]
	}
	return s, ""
}

// chain is sym's path back to the entry ("_"), sym first.
func (g *graph) chain(sym string) []string {
	c := []string{sym}
	for len(c) < 200 {
		p, ok := g.parent[c[len(c)-1]]
		if !ok || p == "_" {
			break
		}
		c = append(c, p)
	}
	return c
}

// causes are the flagged symbols reached by calls, not through a type's
// method table ("type:" symbols on their chain).
func (g *graph) causes() [][]string {
	var out [][]string
	for _, s := range g.reflect {
		c := g.chain(s)
		viaType := false
		for _, x := range c[1:] {
			if strings.HasPrefix(x, "type:") {
				viaType = true
				break
			}
		}
		if !viaType {
			out = append(out, c)
		}
	}
	return out
}

func main() {
	depth := flag.Int("depth", 16, "callers shown per chain")
	flag.Parse()
	g, err := read(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "whydead:", err)
		os.Exit(2)
	}
	if len(g.parent) == 0 {
		fmt.Fprintln(os.Stderr, "whydead: no -dumpdep lines on stdin")
		os.Exit(2)
	}
	causes := g.causes()
	if len(causes) == 0 {
		fmt.Println("dead-code elimination of methods is on: no reachable function looks methods up by a computed name")
		return
	}
	fmt.Printf("dead-code elimination of methods is off: %d reachable function(s) look methods up by a computed name\n", len(causes))
	for _, c := range causes {
		fmt.Printf("\n%s\n", c[0])
		for i, s := range c[1:] {
			if i == *depth {
				fmt.Printf("    ... %d more\n", len(c)-1-i)
				break
			}
			fmt.Printf("    <- %s\n", s)
		}
	}
	os.Exit(1)
}
