// Package config loads edgeplane's config file into a command's flags.
//
// A config file is a YAML mapping whose keys are the long flag names of the
// command (`edgeplane server`), with lists for repeatable flags:
//
//	datastore: etcd
//	https-port: 6443
//	tls-san:
//	  - edge.example.com
//	  - 192.0.2.10
//
// Drop-ins in <file>.d/*.yaml are read after the file, in name order; a later
// file overrides an earlier one key by key (a list replaces the whole list).
// Flags given on the command line win over every file. An unknown key or a
// value of the wrong type is an error naming file:line and the key.
package config

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spf13/pflag"
)

// DefaultPath is read when --config is not given and it exists.
const DefaultPath = "/etc/edgeplane/config.yaml"

// DropInSuffix names the drop-in directory next to a config file.
const DropInSuffix = ".d"

// maxFileSize bounds what is read from one config file.
const maxFileSize = 1 << 20

// Files lists the files to load for path: path itself, then the *.yaml files
// of path.d in name order. A missing path is an error only when required
// (given explicitly); a missing drop-in directory is never one.
func Files(path string, required bool) ([]string, error) {
	var files []string
	switch info, err := os.Stat(path); {
	case err == nil && info.IsDir():
		return nil, fmt.Errorf("config file %s is a directory", path)
	case err == nil:
		files = append(files, path)
	case required || !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("config file: %w", err)
	}
	dir := path + DropInSuffix
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return files, nil
		}
		return nil, fmt.Errorf("config drop-ins: %w", err)
	}
	var names []string
	for _, e := range entries {
		name := e.Name()
		// Skip hidden files (editor swap files) and anything not a regular
		// file or a link to one.
		if strings.HasPrefix(name, ".") || !strings.HasSuffix(name, ".yaml") {
			continue
		}
		if info, err := os.Stat(filepath.Join(dir, name)); err != nil || !info.Mode().IsRegular() {
			continue
		}
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		files = append(files, filepath.Join(dir, name))
	}
	return files, nil
}

// Load reads files in order and sets every flag of flags that they name and
// that was not changed on the command line. It returns every problem found,
// one per line.
func Load(flags *pflag.FlagSet, files []string) error {
	var all []entry
	var errs []error
	for _, file := range files {
		data, err := readFile(file)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		entries, perrs := parse(file, data, flags)
		all = append(all, entries...)
		errs = append(errs, perrs...)
	}
	if len(errs) > 0 {
		return joinLines(errs)
	}
	return apply(flags, all)
}

// apply sets the flags; a later entry for a key overrides an earlier one.
func apply(flags *pflag.FlagSet, entries []entry) error {
	fromCommandLine := map[string]bool{}
	flags.Visit(func(f *pflag.Flag) { fromCommandLine[f.Name] = true })

	last := map[string]int{}
	for i, e := range entries {
		last[e.key] = i
	}
	var errs []error
	for i, e := range entries {
		if last[e.key] != i || fromCommandLine[e.key] {
			continue
		}
		if err := set(flags, e); err != nil {
			errs = append(errs, fmt.Errorf("%s: key %q: %v", e.where(), e.key, err))
		}
	}
	return joinLines(errs)
}

func set(flags *pflag.FlagSet, e entry) error {
	f := flags.Lookup(e.key)
	if sv, ok := f.Value.(pflag.SliceValue); ok {
		values := e.values
		if !e.list {
			values = splitList(e.values[0])
		}
		if err := sv.Replace(values); err != nil {
			return err
		}
		f.Changed = true
		return nil
	}
	return flags.Set(e.key, e.values[0])
}

// splitList splits a scalar given for a repeatable flag at commas, as the
// command line does.
func splitList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

func readFile(file string) ([]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("config file %s: %w", file, err)
	}
	if len(data) > maxFileSize {
		return nil, fmt.Errorf("config file %s is larger than %d bytes", file, maxFileSize)
	}
	return data, nil
}

// joinLines joins errors one per line, or returns nil for none.
func joinLines(errs []error) error { return Problems("config", errs) }

// Problems joins the problems found in a file, one per line under "what:
// N problems:", so that a user sees every one at once; one problem is
// returned as it is, none as nil. Other readers of edgeplane's files
// (registries.yaml) report with it.
func Problems(what string, errs []error) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	lines := make([]string, len(errs))
	for i, err := range errs {
		lines[i] = "  " + err.Error()
	}
	return fmt.Errorf("%s: %d problems:\n%s", what, len(errs), strings.Join(lines, "\n"))
}
