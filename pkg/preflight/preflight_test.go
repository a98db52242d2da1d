package preflight

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// healthy are the facts of a host with nothing to report.
func healthy() Facts {
	return Facts{
		Now:              time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC),
		DataDir:          DataDirFacts{Path: "/var/lib/edgeplane", Exists: true, IsDir: true, Mode: 0o700, Probe: "/var/lib/edgeplane", Free: 10 * GiB},
		MemTotal:         2 * GiB,
		Cgroup:           "v2",
		MemoryController: true,
		Kernel:           "6.6.31+rpt-rpi-v8",
		NoFile:           1 << 20,
		InotifyMax:       8192,
	}
}

func TestEvaluate(t *testing.T) {
	opts := Options{DataDir: "/var/lib/edgeplane", BindAddress: "0.0.0.0", HTTPSPort: 6443, Datastore: "sqlite"}
	tests := []struct {
		name   string
		opts   func(*Options)
		facts  func(*Facts)
		check  string
		want   Severity
		substr string
	}{
		{name: "healthy host", check: "clock", want: OK},
		{name: "clock before 2025", facts: func(f *Facts) { f.Now = time.Date(1970, 1, 1, 0, 1, 0, 0, time.UTC) }, check: "clock", want: Blocker, substr: "before 2025-01-01"},
		{name: "clock behind the certificates", facts: func(f *Facts) { f.NewestCert = f.Now.Add(48 * time.Hour); f.CertFile = "tls/ca.crt" }, check: "clock", want: Blocker, substr: "the clock went back"},
		{name: "port in use", facts: func(f *Facts) {
			f.PortErr = &net.OpError{Op: "listen", Err: os.NewSyscallError("bind", syscall.EADDRINUSE)}
		}, check: "port", want: Blocker, substr: "0.0.0.0:6443 is in use"},
		{name: "privileged port", facts: func(f *Facts) {
			f.PortErr = &net.OpError{Op: "listen", Err: os.NewSyscallError("bind", syscall.EACCES)}
		}, check: "port", want: Blocker, substr: "permission denied"},
		{name: "port 0", opts: func(o *Options) { o.HTTPSPort = 0 }, facts: func(f *Facts) { f.PortErr = syscall.EADDRINUSE }, check: "port", want: OK},
		{name: "data dir is a file", facts: func(f *Facts) { f.DataDir.IsDir = false }, check: "data-dir", want: Blocker, substr: "not a directory"},
		{name: "data dir locked", facts: func(f *Facts) { f.DataDir.LockedBy = "42" }, check: "data-dir", want: Blocker, substr: "pid 42"},
		{name: "data dir not writable", facts: func(f *Facts) { f.DataDir.WriteErr = &os.PathError{Op: "open", Path: "x", Err: syscall.EACCES} }, check: "data-dir", want: Blocker, substr: "not writable (permission denied)"},
		{name: "data dir too open", facts: func(f *Facts) { f.DataDir.Mode = 0o755 }, check: "data-dir", want: Warning, substr: "0755"},
		{name: "data dir to create", facts: func(f *Facts) { f.DataDir.Exists = false; f.DataDir.Probe = "/var/lib" }, check: "data-dir", want: OK, substr: "will be created in /var/lib"},
		{name: "disk nearly full", facts: func(f *Facts) { f.DataDir.Free = 50 * MiB }, check: "disk", want: Blocker, substr: "50 MiB free"},
		{name: "disk low", facts: func(f *Facts) { f.DataDir.Free = 700 * MiB }, check: "disk", want: Warning},
		{name: "memory under 512 MiB", facts: func(f *Facts) { f.MemTotal = 480 * MiB }, check: "memory", want: Warning, substr: "480 MiB total, under the 512 MiB"},
		{name: "1 GB board on sqlite", facts: func(f *Facts) { f.MemTotal = 906 * MiB }, check: "memory", want: OK},
		{name: "1 GB board on etcd", opts: func(o *Options) { o.Datastore = "etcd" }, facts: func(f *Facts) { f.MemTotal = 600 * MiB }, check: "memory", want: Warning, substr: "try --datastore sqlite"},
		{name: "default profile wants 1 GiB", opts: func(o *Options) { o.Profile = "default" }, facts: func(f *Facts) { f.MemTotal = 906 * MiB }, check: "memory", want: Warning, substr: "try --profile small"},
		{name: "small profile on 1 GB", opts: func(o *Options) { o.Profile = "small" }, facts: func(f *Facts) { f.MemTotal = 906 * MiB }, check: "memory", want: OK},
		{name: "cgroup limit counts", facts: func(f *Facts) { f.MemLimit = 256 * MiB }, check: "memory", want: Warning, substr: "cgroup limit"},
		{name: "no memory controller", facts: func(f *Facts) { f.MemoryController = false }, check: "cgroup", want: Warning, substr: "cgroup_enable=memory"},
		{name: "cgroup v1", facts: func(f *Facts) { f.Cgroup = "v1" }, check: "cgroup", want: Warning, substr: "cgroup v1"},
		{name: "old kernel", facts: func(f *Facts) { f.Kernel = "4.14.98-v7+" }, check: "kernel", want: Warning, substr: "older than 4.19"},
		{name: "low open files", facts: func(f *Facts) { f.NoFile = 1024 }, check: "limits", want: Warning, substr: "LimitNOFILE"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o, f := opts, healthy()
			if tc.opts != nil {
				tc.opts(&o)
			}
			if tc.facts != nil {
				tc.facts(&f)
			}
			findings := Evaluate(o, f)
			var got *Finding
			for i := range findings {
				if findings[i].Check == tc.check {
					got = &findings[i]
				}
				// Only the check under test may differ from a healthy host.
				if findings[i].Check != tc.check && findings[i].Severity != OK {
					t.Errorf("unexpected finding: %s", findings[i])
				}
			}
			if got == nil {
				t.Fatalf("no %s finding in %v", tc.check, findings)
			}
			if got.Severity != tc.want || !strings.Contains(got.Message, tc.substr) {
				t.Fatalf("got %s, want %s containing %q", got, tc.want, tc.substr)
			}
		})
	}
}

func TestGather(t *testing.T) {
	proc, cgroup := t.TempDir(), t.TempDir()
	files := map[string]string{
		filepath.Join(proc, "meminfo"):                                     "MemTotal:        3906168 kB\nMemFree: 1 kB\n",
		filepath.Join(proc, "self/cgroup"):                                 "0::/system.slice/edgeplane.service\n",
		filepath.Join(proc, "sys/kernel/osrelease"):                        "6.1.0-rpi7-rpi-v8\n",
		filepath.Join(proc, "sys/fs/inotify/max_user_instances"):           "128\n",
		filepath.Join(cgroup, "cgroup.controllers"):                        "cpuset cpu io memory pids\n",
		filepath.Join(cgroup, "system.slice/edgeplane.service/memory.max"): "536870912\n",
	}
	writeFiles(t, "", files)
	// A busy port on loopback.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	dataDir := filepath.Join(t.TempDir(), "not", "yet")

	f := Gather(Options{DataDir: dataDir, BindAddress: "127.0.0.1", HTTPSPort: port, ProcDir: proc, CgroupDir: cgroup})
	if f.MemTotal != 3906168*1024 || f.MemLimit != 512*MiB {
		t.Errorf("memory: total %d, limit %d", f.MemTotal, f.MemLimit)
	}
	if f.Cgroup != "v2" || !f.MemoryController || f.Kernel != "6.1.0-rpi7-rpi-v8" || f.InotifyMax != 128 {
		t.Errorf("cgroup %q memory %v kernel %q inotify %d", f.Cgroup, f.MemoryController, f.Kernel, f.InotifyMax)
	}
	if !errorsIsInUse(f.PortErr) {
		t.Errorf("port error = %v, want address in use", f.PortErr)
	}
	if f.DataDir.Exists || f.DataDir.WriteErr != nil || f.DataDir.Free == 0 || filepath.Base(filepath.Dir(f.DataDir.Probe)) == "not" {
		t.Errorf("data dir facts: %+v", f.DataDir)
	}
	if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
		t.Errorf("Gather created the data dir: %v", err)
	}

	var out bytes.Buffer
	blocked := Report(&out, Evaluate(Options{HTTPSPort: port, BindAddress: "127.0.0.1", DataDir: dataDir}, f))
	if !blocked || !strings.Contains(out.String(), "BLOCKER port:") || strings.Count(out.String(), "\n") != 9 {
		t.Errorf("blocked = %v, report:\n%s", blocked, out.String())
	}
}

func errorsIsInUse(err error) bool {
	return err != nil && strings.Contains(err.Error(), "address already in use")
}

func TestCgroupMemoryLimit(t *testing.T) {
	const unlimitedV1 = "9223372036854771712\n"
	for _, tc := range []struct {
		name        string
		files       map[string]string // under proc/ and cgroup/
		wantVersion string
		want        uint64
	}{
		{"v2: the process's own cgroup", map[string]string{
			"proc/self/cgroup":                                 "0::/system.slice/edgeplane.service\n",
			"cgroup/cgroup.controllers":                        "cpu memory\n",
			"cgroup/system.slice/memory.max":                   "max\n",
			"cgroup/system.slice/edgeplane.service/memory.max": "536870912\n",
		}, "v2", 512 * MiB},
		{"v2: a parent's lower limit holds", map[string]string{
			"proc/self/cgroup":                  "0::/board/edgeplane\n",
			"cgroup/cgroup.controllers":         "cpu memory\n",
			"cgroup/board/memory.max":           "402653184\n",
			"cgroup/board/edgeplane/memory.max": "max\n",
		}, "v2", 384 * MiB},
		{"v2: no limit", map[string]string{
			"proc/self/cgroup":             "0::/user.slice\n",
			"cgroup/cgroup.controllers":    "cpu memory\n",
			"cgroup/user.slice/memory.max": "max\n",
		}, "v2", 0},
		{"v1: the process's own memory cgroup, not the hierarchy's root", map[string]string{
			"proc/cgroups":                        "#subsys_name hierarchy num_cgroups enabled\nmemory 4 90 1\n",
			"proc/self/cgroup":                    "12:cpu,cpuacct:/other\n4:memory:/edgeplane-board/edgeplane\n0::/\n",
			"cgroup/memory/memory.limit_in_bytes": unlimitedV1,
			"cgroup/memory/edgeplane-board/memory.limit_in_bytes":           unlimitedV1,
			"cgroup/memory/edgeplane-board/edgeplane/memory.limit_in_bytes": "268435456\n",
		}, "v1", 256 * MiB},
		{"v1: a parent's lower limit holds", map[string]string{
			"proc/cgroups":                                        "memory 4 90 1\n",
			"proc/self/cgroup":                                    "4:memory:/board/edgeplane\n",
			"cgroup/memory/memory.limit_in_bytes":                 unlimitedV1,
			"cgroup/memory/board/memory.limit_in_bytes":           "402653184\n",
			"cgroup/memory/board/edgeplane/memory.limit_in_bytes": unlimitedV1,
		}, "v1", 384 * MiB},
		{"v1: in a container, the mount's root is its cgroup", map[string]string{
			"proc/cgroups":                        "memory 4 90 1\n",
			"proc/self/cgroup":                    "4:memory:/docker/0123abcd\n",
			"cgroup/memory/memory.limit_in_bytes": "1073741824\n",
		}, "v1", 1024 * MiB},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFiles(t, dir, tc.files)
			version, _, limit := cgroupFacts(filepath.Join(dir, "proc"), filepath.Join(dir, "cgroup"))
			if version != tc.wantVersion || limit != tc.want {
				t.Fatalf("cgroupFacts = %s, limit %d MiB; want %s, %d MiB", version, limit/MiB, tc.wantVersion, tc.want/MiB)
			}
		})
	}
}

// writeFiles writes files (path under root -> content), making their
// directories.
func writeFiles(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
