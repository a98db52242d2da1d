package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
)

// entry is one key of a config file, checked against its flag.
type entry struct {
	file string
	line int
	key  string
	// values holds one scalar, or the items of a list.
	values []string
	// list is true when the file gave a YAML sequence (replace the whole
	// list); a scalar for a list flag is split at commas as on the command line.
	list bool
}

func (e entry) where() string { return fmt.Sprintf("%s:%d", e.file, e.line) }

// commandLineOnly are flags a config file cannot set: they ask a command for
// something else than its work (help, the version), which the command
// decides before it reads the file.
var commandLineOnly = map[string]bool{"help": true, "version": true}

// maxAliasDepth bounds alias chains (a: &x ..., b: *x) so that a hostile file
// cannot make the walk loop.
const maxAliasDepth = 8

// parse reads one config file: a YAML mapping from long flag names of flags to
// values. It returns the entries in file order, or every problem found, each
// naming file:line and the key.
func parse(file string, data []byte, flags *pflag.FlagSet) (entries []entry, errs []error) {
	defer func() {
		// A config file must never crash the server with a stack trace.
		if r := recover(); r != nil {
			entries, errs = nil, []error{fmt.Errorf("%s: cannot parse YAML: %v", file, r)}
		}
	}()
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil // empty, or only comments
		}
		return nil, []error{fmt.Errorf("%s: %v", file, yamlError(err))}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, []error{fmt.Errorf("%s:%d: only one YAML document is allowed", file, extra.Line)}
	}
	root := &doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			return nil, nil
		}
		root = root.Content[0]
	}
	if root.Kind == yaml.ScalarNode && root.ShortTag() == "!!null" {
		return nil, nil
	}
	if root.Kind != yaml.MappingNode {
		return nil, []error{fmt.Errorf("%s:%d: want a mapping of flag names to values, got %s", file, root.Line, KindName(root))}
	}

	seen := map[string]int{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		bad := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("%s:%d: "+format, append([]any{file, k.Line}, args...)...))
		}
		if k.Kind != yaml.ScalarNode {
			bad("a key must be a flag name, got %s", KindName(k))
			continue
		}
		key := k.Value
		if first, dup := seen[key]; dup {
			bad("key %q repeats the one on line %d", key, first)
			continue
		}
		seen[key] = k.Line
		if key == "config" || commandLineOnly[key] {
			bad("key %q is not allowed in a config file", key)
			continue
		}
		f := flags.Lookup(key)
		if f == nil {
			bad("unknown key %q%s", key, suggest(key, flags))
			continue
		}
		e, err := value(f, ResolveAlias(v))
		if err != nil {
			bad("key %q: %v", key, err)
			continue
		}
		e.file, e.line, e.key = file, k.Line, key
		entries = append(entries, e)
	}
	return entries, errs
}

// ResolveAlias follows aliases to the node they name (at most
// maxAliasDepth); the readers of edgeplane's other files (registries.yaml)
// use it too.
func ResolveAlias(n *yaml.Node) *yaml.Node {
	for depth := 0; n != nil && n.Kind == yaml.AliasNode && depth < maxAliasDepth; depth++ {
		n = n.Alias
	}
	return n
}

// value checks node against the flag's type and returns its string form(s).
func value(f *pflag.Flag, n *yaml.Node) (entry, error) {
	if n == nil || n.Kind == yaml.AliasNode {
		return entry{}, fmt.Errorf("alias chain too long")
	}
	typ := f.Value.Type()
	elem, isList := listElem(f)
	if isList {
		switch n.Kind {
		case yaml.SequenceNode:
			out := make([]string, 0, len(n.Content))
			for _, item := range n.Content {
				item = ResolveAlias(item)
				if item == nil || item.Kind != yaml.ScalarNode {
					return entry{}, fmt.Errorf("want a list of %s values, got an item that is %s", elem, KindName(item))
				}
				s, err := scalar(elem, item)
				if err != nil {
					return entry{}, fmt.Errorf("list item on line %d: %v", item.Line, err)
				}
				out = append(out, s)
			}
			return entry{values: out, list: true}, nil
		case yaml.ScalarNode:
			s, err := scalar("string", n)
			if err != nil {
				return entry{}, err
			}
			return entry{values: []string{s}}, nil
		default:
			return entry{}, fmt.Errorf("want a list of %s values, got %s", elem, KindName(n))
		}
	}
	if n.Kind != yaml.ScalarNode {
		return entry{}, fmt.Errorf("want %s, got %s", describe(typ), KindName(n))
	}
	s, err := scalar(typ, n)
	if err != nil {
		return entry{}, err
	}
	return entry{values: []string{s}}, nil
}

// listElem reports whether the flag is repeatable and the type of one item.
func listElem(f *pflag.Flag) (string, bool) {
	if _, ok := f.Value.(pflag.SliceValue); !ok {
		return "", false
	}
	typ := f.Value.Type()
	for _, suffix := range []string{"Slice", "Array"} {
		if elem, ok := strings.CutSuffix(typ, suffix); ok {
			return elem, true
		}
	}
	return "string", true
}

// scalar checks one YAML scalar against a pflag type name and returns the
// text to give the flag.
func scalar(typ string, n *yaml.Node) (string, error) {
	tag := n.ShortTag()
	if tag == "!!null" {
		return "", fmt.Errorf("has no value: want %s", describe(typ))
	}
	fail := func() (string, error) {
		return "", fmt.Errorf("want %s, got %q", describe(typ), n.Value)
	}
	switch typ {
	case "bool":
		if tag != "!!bool" {
			return fail()
		}
		b, err := strconv.ParseBool(strings.ToLower(n.Value))
		if err != nil {
			return fail()
		}
		return strconv.FormatBool(b), nil
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64", "count":
		if tag != "!!int" {
			return fail()
		}
		return n.Value, nil
	case "float32", "float64":
		if tag != "!!int" && tag != "!!float" {
			return fail()
		}
		return n.Value, nil
	case "duration":
		if _, err := time.ParseDuration(n.Value); err != nil {
			return fail()
		}
		return n.Value, nil
	default:
		// Strings (and types whose Set checks them): any scalar, as written,
		// so that a mode such as 0600 keeps its leading zero.
		if tag != "!!str" && tag != "!!int" && tag != "!!float" && tag != "!!bool" {
			return fail()
		}
		return n.Value, nil
	}
}

func describe(typ string) string {
	switch typ {
	case "bool":
		return "true or false"
	case "int", "int8", "int16", "int32", "int64", "count":
		return "an integer"
	case "uint", "uint8", "uint16", "uint32", "uint64":
		return "a non-negative integer"
	case "float32", "float64":
		return "a number"
	case "duration":
		return "a duration such as 30s"
	case "string":
		return "a string"
	}
	return "a " + typ + " value"
}

// KindName says what a node is, for messages: "a mapping", "a list", the
// value, "no value" or "nothing".
func KindName(n *yaml.Node) string {
	if n == nil {
		return "nothing"
	}
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.ShortTag() == "!!null" {
			return "no value"
		}
		return fmt.Sprintf("the value %q", n.Value)
	case yaml.AliasNode:
		return "an alias"
	}
	return "a document"
}

// yamlError drops the library's "yaml: " prefix: the file name says enough.
func yamlError(err error) string {
	return strings.TrimPrefix(err.Error(), "yaml: ")
}

// suggest names the closest flag when the key looks like a typo of one.
func suggest(key string, flags *pflag.FlagSet) string {
	best, bestDist := "", 3
	flags.VisitAll(func(f *pflag.Flag) {
		if f.Name == "config" || commandLineOnly[f.Name] {
			return
		}
		if d := distance(key, f.Name, bestDist); d < bestDist {
			best, bestDist = f.Name, d
		}
	})
	if best == "" {
		return " (not a flag of edgeplane server)"
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// distance is the Levenshtein distance of a and b, or limit when it is at least limit.
func distance(a, b string, limit int) int {
	if len(a) > 64 || len(b) > 64 {
		return limit
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return min(prev[len(b)], limit)
}
