package app

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRuntimeToolAddressGiven(t *testing.T) {
	tests := []struct {
		name    string
		tool    runtimeTool
		args    []string
		environ []string
		want    bool
	}{
		{"crictl bare", crictlTool, []string{"ps"}, nil, false},
		{"crictl -r", crictlTool, []string{"-r", "unix:///x.sock", "ps"}, nil, true},
		{"crictl --runtime-endpoint=", crictlTool, []string{"--runtime-endpoint=unix:///x.sock", "ps"}, nil, true},
		{"crictl single-dash long", crictlTool, []string{"-runtime-endpoint", "unix:///x.sock", "ps"}, nil, true},
		{"crictl --config", crictlTool, []string{"--config", "/etc/mine.yaml", "images"}, nil, true},
		{"crictl -i", crictlTool, []string{"-i", "unix:///img.sock", "images"}, nil, true},
		{"crictl value flag skipped", crictlTool, []string{"--timeout", "5s", "ps"}, nil, false},
		{"crictl value flag then -r", crictlTool, []string{"-t", "5s", "-r", "unix:///x.sock", "ps"}, nil, true},
		// After the subcommand, flags are the subcommand's: exec's -r is not the endpoint.
		{"crictl subcommand flag", crictlTool, []string{"exec", "-it", "abc", "ls", "-r"}, nil, false},
		{"crictl env", crictlTool, []string{"ps"}, []string{"CONTAINER_RUNTIME_ENDPOINT=unix:///x.sock"}, true},
		{"crictl empty env", crictlTool, []string{"ps"}, []string{"CONTAINER_RUNTIME_ENDPOINT="}, false},
		{"crictl config env", crictlTool, []string{"ps"}, []string{"CRI_CONFIG_FILE=/etc/mine.yaml"}, true},
		{"ctr bare", ctrTool, []string{"images", "ls"}, nil, false},
		{"ctr -n only", ctrTool, []string{"-n", "k8s.io", "images", "ls"}, nil, false},
		{"ctr -a", ctrTool, []string{"-n", "k8s.io", "-a", "/x.sock", "images", "ls"}, nil, true},
		{"ctr --address=", ctrTool, []string{"--address=/x.sock", "c", "ls"}, nil, true},
		{"ctr env", ctrTool, []string{"c", "ls"}, []string{"CONTAINERD_ADDRESS=/x.sock"}, true},
		{"ctr crictl's env", ctrTool, []string{"c", "ls"}, []string{"CONTAINER_RUNTIME_ENDPOINT=unix:///x.sock"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.tool.addressGiven(tt.args, tt.environ); got != tt.want {
				t.Errorf("addressGiven(%q, %q) = %t, want %t", tt.args, tt.environ, got, tt.want)
			}
		})
	}
}

func TestToolDataDirs(t *testing.T) {
	t.Setenv(dataDirEnv, "/env/dir")
	tests := []struct {
		args     []string
		wantDirs []string
		wantArgs []string
		wantErr  string
	}{
		{[]string{"ps"}, []string{"/env/dir"}, []string{"ps"}, ""},
		{[]string{"--data-dir", "/d", "ps", "-a"}, []string{"/d"}, []string{"ps", "-a"}, ""},
		{[]string{"--data-dir=/d", "images"}, []string{"/d"}, []string{"images"}, ""},
		// Only a leading --data-dir is edgeplane's.
		{[]string{"ps", "--data-dir", "/d"}, []string{"/env/dir"}, []string{"ps", "--data-dir", "/d"}, ""},
		{[]string{"--data-dir"}, nil, nil, "--data-dir needs a directory"},
		{[]string{"--data-dir="}, nil, nil, "--data-dir= is empty"},
	}
	for _, tt := range tests {
		dirs, args, err := toolDataDirs(tt.args)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("toolDataDirs(%q): error %v, want one with %q", tt.args, err, tt.wantErr)
			}
			continue
		}
		if err != nil || strings.Join(dirs, ",") != strings.Join(tt.wantDirs, ",") || strings.Join(args, " ") != strings.Join(tt.wantArgs, " ") {
			t.Errorf("toolDataDirs(%q) = %q, %q, %v; want %q, %q", tt.args, dirs, args, err, tt.wantDirs, tt.wantArgs)
		}
	}
}

// TestPickSocket: the first socket found is taken if it answers; a socket
// file nobody listens on is reported, not passed over; no socket at all
// names every place looked at.
func TestPickSocket(t *testing.T) {
	dir, err := os.MkdirTemp("/tmp", "ep-sock")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	live := filepath.Join(dir, "live.sock")
	l, err := net.Listen("unix", live)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	dead := filepath.Join(dir, "dead.sock")
	dl, err := net.Listen("unix", dead)
	if err != nil {
		t.Fatal(err)
	}
	dl.(*net.UnixListener).SetUnlinkOnClose(false)
	_ = dl.Close()
	missing := filepath.Join(dir, "missing.sock")
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, nil, 0o600); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name    string
		paths   []string
		want    string
		wantErr []string
	}{
		{"first live", []string{missing, plain, live}, live, nil},
		{"dead first is reported", []string{dead, live}, "", []string{"no container runtime answers on " + dead, "connection refused"}},
		{"none", []string{missing, plain}, "", []string{"no container runtime socket at " + missing + ", " + plain}},
		{"cannot look", []string{filepath.Join(plain, "x.sock"), live}, "", []string{"cannot look for a runtime socket at " + filepath.Join(plain, "x.sock")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := pickSocket(tt.paths)
			if tt.wantErr == nil {
				if err != nil || got != tt.want {
					t.Fatalf("pickSocket = %q, %v; want %q", got, err, tt.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("pickSocket = %q, want an error", got)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// TestToolBinary: beside edgeplane's binary first, then the PATH; a
// missing tool is an error that says where it was looked for.
func TestToolBinary(t *testing.T) {
	pathDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(pathDir, "ep-test-tool"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", pathDir)
	got, err := toolBinary("ep-test-tool")
	if err != nil || got != filepath.Join(pathDir, "ep-test-tool") {
		t.Errorf("toolBinary = %q, %v; want the one on the PATH", got, err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// A link to edgeplane itself named after the tool is not the tool.
	if err := os.Symlink(self, filepath.Join(pathDir, "ep-self-tool")); err != nil {
		t.Fatal(err)
	}
	if got, err := toolBinary("ep-self-tool"); err == nil {
		t.Errorf("toolBinary took %q, a link to edgeplane's own binary", got)
	}
	_, err = toolBinary("ep-no-such-tool")
	if err == nil || !strings.Contains(err.Error(), "no ep-no-such-tool binary beside ") {
		t.Errorf("toolBinary of a missing tool: %v, want an error naming where it looked", err)
	}
}

// TestRuntimeToolVersion: --version among the tool's global flags is
// edgeplane's (as on every command); after the subcommand it is the
// command's in the container.
func TestRuntimeToolVersion(t *testing.T) {
	tests := []struct {
		args []string
		want bool
	}{
		{[]string{"--version"}, true},
		{[]string{"-r", "unix:///x.sock", "--version"}, true},
		{[]string{"exec", "-it", "abc", "app", "--version"}, false},
		{[]string{"-r", "--version", "ps"}, false}, // -r's value
	}
	for _, tt := range tests {
		got, err := versionAsked(crictlTool.globalFlags(tt.args))
		if err != nil || got != tt.want {
			t.Errorf("version asked in %q: %t, %v; want %t", tt.args, got, err, tt.want)
		}
	}
}
