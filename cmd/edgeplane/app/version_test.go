package app

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// commandPaths lists the argument paths of every command in root's tree
// ("server", "certs rotate", ...), root itself as an empty path.
func commandPaths(root *cobra.Command) [][]string {
	var paths [][]string
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		paths = append(paths, path)
		for _, sub := range c.Commands() {
			walk(sub, append(slices.Clone(path), sub.Name()))
		}
	}
	walk(root, nil)
	return paths
}

// TestVersionFlag: `--version` on every command prints the version and
// succeeds, whatever else is on the command line, and the command does
// nothing else: no data dir is touched, no server starts.
func TestVersionFlag(t *testing.T) {
	dataDir := t.TempDir()
	// The commands that work on a server's data dir take this one.
	t.Setenv(dataDirEnv, dataDir)
	want := versionText()
	paths := commandPaths(NewRootCommand(&bytes.Buffer{}, &bytes.Buffer{}))
	if len(paths) < 15 {
		t.Fatalf("found %d commands, want the whole tree", len(paths))
	}
	for _, path := range paths {
		name := strings.Join(append([]string{"edgeplane"}, path...), " ")
		t.Run(name, func(t *testing.T) {
			args := append(slices.Clone(path), "--"+versionFlag)
			switch strings.Join(path, " ") {
			case "server", "check":
				// A data dir of the test's, and a datastore the server
				// refuses before it starts anything, should the command
				// not act on --version.
				args = append(args, "--data-dir", dataDir, "--datastore", "none-such")
			case "kubectl":
				// kubectl's own flags around it.
				args = append(args, "-n", "kube-system", "get", "pods")
			}
			var stdout, stderr bytes.Buffer
			root := NewRootCommand(&stdout, &stderr)
			root.SetArgs(args)
			if err := root.Execute(); err != nil {
				t.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
			}
			if stdout.String() != want {
				t.Errorf("%s printed:\n%s\nwant the version:\n%s", strings.Join(args, " "), stdout.String(), want)
			}
			entries, err := os.ReadDir(dataDir)
			if err != nil {
				t.Fatal(err)
			}
			if len(entries) > 0 {
				t.Errorf("%s wrote %s in the data dir", strings.Join(args, " "), entries[0].Name())
				for _, e := range entries {
					_ = os.RemoveAll(filepath.Join(dataDir, e.Name()))
				}
			}
		})
	}
}

// TestVersionFlagOff: --version=false is no request, and a config file
// cannot ask for the version (pkg/config refuses the key).
func TestVersionFlagOff(t *testing.T) {
	var stdout, stderr bytes.Buffer
	root := NewRootCommand(&stdout, &stderr)
	root.SetArgs([]string{"version", "--version=false"})
	if err := root.Execute(); err != nil || stdout.String() != versionText() {
		t.Fatalf("edgeplane version --version=false: %v, %q", err, stdout.String())
	}

	config := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(config, []byte("version: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	stdout.Reset()
	root = NewRootCommand(&stdout, &stderr)
	// A datastore the server refuses, should the key be taken and ignored.
	root.SetArgs([]string{"server", "--config", config, "--data-dir", t.TempDir(), "--datastore", "none-such"})
	err := root.Execute()
	if err == nil || !strings.Contains(err.Error(), `key "version" is not allowed in a config file`) {
		t.Fatalf("server with version: true in its config file: %v, want the key refused", err)
	}
}

// TestNoUpstreamGlobalFlags: every flag a command takes is edgeplane's.
// Cobra adds pflag's process-wide flag set to every command, and upstream
// packages register flags there when they are loaded: component-base's
// --version was one, accepted by every command and acted on by none.
func TestNoUpstreamGlobalFlags(t *testing.T) {
	root := NewRootCommand(&bytes.Buffer{}, &bytes.Buffer{})
	var leaked []string
	pflag.CommandLine.VisitAll(func(f *pflag.Flag) { leaked = append(leaked, f.Name) })
	if len(leaked) > 0 {
		t.Errorf("pflag.CommandLine holds %v: cobra would add them to every command", leaked)
	}
	for _, path := range commandPaths(root) {
		c, _, err := root.Find(path)
		if err != nil {
			t.Fatal(err)
		}
		// The root's own, and those of the command's other ancestors.
		own := []string{"v", "vmodule", versionFlag}
		for p := c.Parent(); p != nil && p != root; p = p.Parent() {
			p.PersistentFlags().VisitAll(func(f *pflag.Flag) { own = append(own, f.Name) })
		}
		c.InheritedFlags().VisitAll(func(f *pflag.Flag) {
			if !slices.Contains(own, f.Name) {
				t.Errorf("%s inherits --%s, which no edgeplane command declares", c.CommandPath(), f.Name)
			}
		})
	}
}
