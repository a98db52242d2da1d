package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// testFlags mirrors the kinds of flag `edgeplane server` has.
type testFlags struct {
	fs       *pflag.FlagSet
	dataDir  string
	port     int
	sans     []string
	mode     string
	allocate bool
}

func newTestFlags() *testFlags {
	t := &testFlags{fs: pflag.NewFlagSet("server", pflag.ContinueOnError)}
	t.fs.StringVar(&t.dataDir, "data-dir", "/var/lib/edgeplane", "")
	t.fs.IntVar(&t.port, "https-port", 6443, "")
	t.fs.StringSliceVar(&t.sans, "tls-san", nil, "")
	t.fs.StringVar(&t.mode, "write-kubeconfig-mode", "0600", "")
	t.fs.BoolVar(&t.allocate, "allocate-node-cidrs", false, "")
	t.fs.String("config", DefaultPath, "")
	t.fs.Bool("help", false, "")
	t.fs.Bool("version", false, "")
	return t
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestLoad(t *testing.T) {
	tests := []struct {
		name    string
		main    string            // config.yaml; "" means absent
		dropIns map[string]string // config.yaml.d/<name>
		args    []string          // command line
		want    func(*testing.T, *testFlags)
		wantErr []string // substrings of the error, in order of appearance
	}{
		{
			name: "every type",
			main: "data-dir: /srv/ep\nhttps-port: 7443\ntls-san:\n  - a.example\n  - 192.0.2.1\nwrite-kubeconfig-mode: 0644\nallocate-node-cidrs: true\n",
			want: func(t *testing.T, f *testFlags) {
				if f.dataDir != "/srv/ep" || f.port != 7443 || f.mode != "0644" || !f.allocate {
					t.Errorf("got %+v", f)
				}
				if strings.Join(f.sans, "|") != "a.example|192.0.2.1" {
					t.Errorf("tls-san = %q", f.sans)
				}
			},
		},
		{
			name: "empty and comment-only files are fine",
			main: "# nothing here\n",
			want: func(t *testing.T, f *testFlags) {
				if f.port != 6443 {
					t.Errorf("https-port = %d", f.port)
				}
			},
		},
		{
			name: "command line wins",
			main: "https-port: 7443\ntls-san: [a.example]\n",
			args: []string{"--https-port=8443", "--tls-san=b.example"},
			want: func(t *testing.T, f *testFlags) {
				if f.port != 8443 || strings.Join(f.sans, ",") != "b.example" {
					t.Errorf("got port %d, sans %q", f.port, f.sans)
				}
			},
		},
		{
			name:    "drop-ins merge in name order, lists replace",
			main:    "https-port: 7443\ntls-san: [a.example]\n",
			dropIns: map[string]string{"20-b.yaml": "https-port: 9443\n", "10-a.yaml": "https-port: 8443\ntls-san: [c.example, d.example]\n", ".swap.yaml": "bogus: 1\n", "notes.txt": "bogus: 1\n"},
			want: func(t *testing.T, f *testFlags) {
				if f.port != 9443 || strings.Join(f.sans, ",") != "c.example,d.example" {
					t.Errorf("got port %d, sans %q", f.port, f.sans)
				}
			},
		},
		{
			name:    "drop-ins without a main file",
			dropIns: map[string]string{"a.yaml": "data-dir: /d\n"},
			want: func(t *testing.T, f *testFlags) {
				if f.dataDir != "/d" {
					t.Errorf("data-dir = %q", f.dataDir)
				}
			},
		},
		{
			name: "scalar for a list splits at commas",
			main: "tls-san: a.example, b.example\n",
			want: func(t *testing.T, f *testFlags) {
				if strings.Join(f.sans, "|") != "a.example|b.example" {
					t.Errorf("tls-san = %q", f.sans)
				}
			},
		},
		{
			name:    "typo names file, line, key and a suggestion",
			main:    "data-dir: /x\ntls-sans:\n  - a\n",
			wantErr: []string{"config.yaml:2: unknown key \"tls-sans\" (did you mean \"tls-san\"?)"},
		},
		{
			name:    "unrelated key",
			main:    "kubelet-arg: x\n",
			wantErr: []string{"config.yaml:1: unknown key \"kubelet-arg\" (not a flag of edgeplane server)"},
		},
		{
			name:    "wrong types, every one reported",
			main:    "https-port: abc\nallocate-node-cidrs: yes\ntls-san: {a: b}\ndata-dir: [a]\n",
			wantErr: []string{":1: key \"https-port\": want an integer, got \"abc\"", ":2: key \"allocate-node-cidrs\": want true or false", ":3: key \"tls-san\": want a list of string values, got a mapping", ":4: key \"data-dir\": want a string, got a list"},
		},
		{
			name:    "out of range integer fails at Set with its line",
			main:    "\nhttps-port: 99999999999999999999\n",
			wantErr: []string{"config.yaml:2: key \"https-port\""},
		},
		{
			name:    "error in a drop-in names the drop-in",
			main:    "https-port: 7443\n",
			dropIns: map[string]string{"50-x.yaml": "# c\nhttps-prot: 1\n"},
			wantErr: []string{filepath.Join("config.yaml.d", "50-x.yaml") + ":2: unknown key \"https-prot\""},
		},
		{
			name:    "null value",
			main:    "data-dir:\n",
			wantErr: []string{":1: key \"data-dir\": has no value"},
		},
		{
			name:    "duplicate key",
			main:    "https-port: 1\nhttps-port: 2\n",
			wantErr: []string{":2: key \"https-port\" repeats the one on line 1"},
		},
		{
			name:    "config key is refused",
			main:    "config: /other.yaml\n",
			wantErr: []string{":1: key \"config\" is not allowed"},
		},
		{
			// A command decides on --help and --version before it reads
			// its config file: set there, they would be ignored.
			name:    "help and version are refused",
			main:    "version: true\nhelp: true\n",
			wantErr: []string{":1: key \"version\" is not allowed", ":2: key \"help\" is not allowed"},
		},
		{
			name:    "not a mapping",
			main:    "- a\n- b\n",
			wantErr: []string{"config.yaml:1: want a mapping of flag names to values, got a list"},
		},
		{
			name:    "broken YAML",
			main:    "a: [\n",
			wantErr: []string{"config.yaml: "},
		},
		{
			name:    "two documents",
			main:    "https-port: 1\n---\nhttps-port: 2\n",
			wantErr: []string{"only one YAML document"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "config.yaml")
			if tc.main != "" {
				writeFile(t, path, tc.main)
			}
			for name, data := range tc.dropIns {
				writeFile(t, filepath.Join(path+DropInSuffix, name), data)
			}
			f := newTestFlags()
			if err := f.fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			files, err := Files(path, false)
			if err != nil {
				t.Fatal(err)
			}
			err = Load(f.fs, files)
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatalf("Load: %v", err)
				}
				tc.want(t, f)
				return
			}
			if err == nil {
				t.Fatalf("Load succeeded, want an error with %q", tc.wantErr)
			}
			msg := err.Error()
			for _, want := range tc.wantErr {
				i := strings.Index(msg, want)
				if i < 0 {
					t.Fatalf("error %q does not contain %q", msg, want)
				}
				msg = msg[i+len(want):]
			}
		})
	}
}

func TestFiles(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.yaml")
	tests := []struct {
		name     string
		path     string
		required bool
		want     int
		wantErr  string
	}{
		{name: "absent default is fine", path: missing, want: 0},
		{name: "absent explicit file is an error", path: missing, required: true, wantErr: "no such file"},
		{name: "a directory is an error", path: dir, wantErr: "is a directory"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			files, err := Files(tc.path, tc.required)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || len(files) != tc.want {
				t.Fatalf("files = %q, err = %v", files, err)
			}
		})
	}
}

// FuzzLoad feeds arbitrary bytes to the parser and loader: they may fail, but
// must never panic.
func FuzzLoad(f *testing.F) {
	for _, seed := range []string{
		"", "# c\n", "https-port: 1\n", "tls-san: [a, b]\n", "tls-san: a,b\n",
		"a: &x 1\nb: *x\n", "https-port: &p 1\ndata-dir: *p\n", "tls-san: [*x]\n",
		"- 1\n", "{", "data-dir:\n", "---\n---\n", "allocate-node-cidrs: true\n",
		"? [a]\n: b\n", "https-port: 1\nhttps-port: 2\n", "\xff\xfe",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		flags := newTestFlags()
		done := make(chan []error, 1)
		go func() {
			entries, errs := parse("fuzz.yaml", data, flags.fs)
			if len(errs) == 0 {
				_ = apply(flags.fs, entries)
			}
			done <- errs
		}()
		var errs []error
		select {
		case errs = <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("parse took over 5 s on %q", data)
		}
		for _, err := range errs {
			if !strings.HasPrefix(err.Error(), "fuzz.yaml") {
				t.Fatalf("error does not name the file: %v", err)
			}
		}
	})
}
