package preflight

import (
	"bufio"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Facts are what Gather found on the host.
type Facts struct {
	Now time.Time

	// NewestCert is the latest NotBefore among the data dir's certificates
	// (zero when there are none), and CertFile the file that holds it.
	NewestCert time.Time
	CertFile   string

	// PortErr is the error of listening on the API address; nil when free.
	PortErr error

	DataDir DataDirFacts

	// MemTotal is the host's memory; MemLimit the cgroup's limit (0: none).
	MemTotal uint64
	MemLimit uint64

	// Cgroup is "v2", "v1" or "" (unknown); MemoryController whether the
	// memory controller is enabled (meaningful when Cgroup is set).
	Cgroup           string
	MemoryController bool

	Kernel     string
	NoFile     uint64
	InotifyMax int // 0 when unknown
}

// DataDirFacts describe the data dir, or its nearest existing parent.
type DataDirFacts struct {
	Path   string
	Exists bool
	IsDir  bool
	Mode   fs.FileMode
	// Probe is the nearest existing directory: the data dir or a parent.
	Probe    string
	WriteErr error
	Free     uint64
	FreeErr  error
	// LockedBy is the pid holding the data dir lock, "" when none.
	LockedBy string
}

// Gather reads the facts from the system. It changes nothing except a
// short-lived probe file in the data dir (or its nearest parent).
func Gather(o Options) Facts {
	procDir, cgroupDir := o.ProcDir, o.CgroupDir
	if procDir == "" {
		procDir = "/proc"
	}
	if cgroupDir == "" {
		cgroupDir = "/sys/fs/cgroup"
	}
	now := time.Now
	if o.Now != nil {
		now = o.Now
	}
	f := Facts{Now: now()}
	f.NewestCert, f.CertFile = newestCert(filepath.Join(o.DataDir, "tls"))
	f.PortErr = portFree(o.BindAddress, o.HTTPSPort)
	f.DataDir = dataDirFacts(o.DataDir)
	f.MemTotal = memTotal(filepath.Join(procDir, "meminfo"))
	f.Cgroup, f.MemoryController, f.MemLimit = cgroupFacts(procDir, cgroupDir)
	f.Kernel = strings.TrimSpace(readString(filepath.Join(procDir, "sys/kernel/osrelease")))
	f.InotifyMax, _ = strconv.Atoi(strings.TrimSpace(readString(filepath.Join(procDir, "sys/fs/inotify/max_user_instances"))))
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err == nil {
		f.NoFile = rl.Max
	}
	return f
}

func readString(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return string(b)
}

// newestCert finds the latest NotBefore among dir/*.crt.
func newestCert(dir string) (time.Time, string) {
	var newest time.Time
	var file string
	paths, _ := filepath.Glob(filepath.Join(dir, "*.crt"))
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		for {
			var block *pem.Block
			block, data = pem.Decode(data)
			if block == nil {
				break
			}
			cert, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				continue
			}
			if cert.NotBefore.After(newest) {
				newest, file = cert.NotBefore, p
			}
		}
	}
	return newest, file
}

// portFree listens on the address and closes at once; port 0 is always free.
func portFree(bind string, port int) error {
	if port == 0 {
		return nil
	}
	if bind == "" {
		bind = "0.0.0.0"
	}
	l, err := net.Listen("tcp", net.JoinHostPort(bind, strconv.Itoa(port)))
	if err != nil {
		return err
	}
	return l.Close()
}

func dataDirFacts(dir string) DataDirFacts {
	d := DataDirFacts{Path: dir}
	if info, err := os.Stat(dir); err == nil {
		d.Exists, d.IsDir, d.Mode = true, info.IsDir(), info.Mode().Perm()
	}
	// The nearest existing directory is where the server would create it.
	probe := dir
	for {
		if info, err := os.Stat(probe); err == nil && info.IsDir() {
			break
		}
		parent := filepath.Dir(probe)
		if parent == probe {
			break
		}
		probe = parent
	}
	d.Probe = probe
	if tmp, err := os.CreateTemp(probe, ".edgeplane-check-*"); err != nil {
		d.WriteErr = err
	} else {
		_ = tmp.Close()
		_ = os.Remove(tmp.Name())
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(probe, &st); err != nil {
		d.FreeErr = err
	} else {
		d.Free = st.Bavail * uint64(st.Bsize)
	}
	d.LockedBy = lockHolder(filepath.Join(dir, "edgeplane.lock"))
	return d
}

// lockHolder returns the pid in the lock file when another process holds
// the lock, else "".
func lockHolder(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if errors.Is(err, syscall.EWOULDBLOCK) {
			b, _ := os.ReadFile(path)
			if pid := strings.TrimSpace(string(b)); pid != "" {
				return pid
			}
			return "unknown"
		}
		return ""
	}
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return ""
}

// memTotal reads MemTotal from meminfo, in bytes (0 when unknown).
func memTotal(path string) uint64 {
	sc := bufio.NewScanner(strings.NewReader(readString(path)))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			kb, err := strconv.ParseUint(fields[1], 10, 64)
			if err == nil {
				return kb * 1024
			}
		}
	}
	return 0
}

// cgroupFacts tells the cgroup version, whether the memory controller is
// on, and the memory limit of this process's cgroup: the lowest limit on
// the path from it up to the hierarchy's root, as a limit on a parent (a
// systemd slice, a board's cgroup over every part) holds its children too.
func cgroupFacts(procDir, cgroupDir string) (version string, memory bool, limit uint64) {
	self := readString(filepath.Join(procDir, "self/cgroup"))
	if controllers, err := os.ReadFile(filepath.Join(cgroupDir, "cgroup.controllers")); err == nil {
		memory = slices.Contains(strings.Fields(string(controllers)), "memory")
		// This process's cgroup: "0::/path".
		for _, line := range strings.Split(self, "\n") {
			if rest, ok := strings.CutPrefix(line, "0::"); ok {
				limit = lowestLimit(cgroupDir, rest, "memory.max")
			}
		}
		return "v2", memory, limit
	}
	// cgroup v1: /proc/cgroups lists "subsys hierarchy num_cgroups enabled".
	data := readString(filepath.Join(procDir, "cgroups"))
	if data == "" {
		return "", false, 0
	}
	for _, line := range strings.Split(data, "\n") {
		fields := strings.Fields(line)
		if len(fields) == 4 && fields[0] == "memory" {
			memory = fields[3] == "1"
		}
	}
	// This process's memory cgroup: "N:memory:/path" (or the controller
	// among others, "N:cpu,memory:/path"); "/" in a container with its own
	// cgroup namespace, where the mount's root is the container's cgroup.
	path := "/"
	for _, line := range strings.Split(self, "\n") {
		if f := strings.SplitN(line, ":", 3); len(f) == 3 && slices.Contains(strings.Split(f[1], ","), "memory") {
			path = f[2]
		}
	}
	limit = lowestLimit(filepath.Join(cgroupDir, "memory"), path, "memory.limit_in_bytes")
	return "v1", memory, limit
}

// lowestLimit is the lowest limit (0: none) that file states in the cgroup
// at path under root and in its ancestors up to root itself. A directory
// that is not there (the path of a cgroup outside this mount namespace's
// view) is skipped.
func lowestLimit(root, path, file string) uint64 {
	var lowest uint64
	for dir := filepath.Clean("/" + path); ; dir = filepath.Dir(dir) {
		if l := parseLimit(readString(filepath.Join(root, dir, file))); l != 0 && (lowest == 0 || l < lowest) {
			lowest = l
		}
		if dir == "/" {
			return lowest
		}
	}
}

// parseLimit reads a cgroup memory limit; "max" or absurdly large values
// (v1's "no limit") are 0.
func parseLimit(s string) uint64 {
	v, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
	if err != nil || v >= 1<<62 {
		return 0
	}
	return v
}

// HostMemory is the memory this process may use: the host's MemTotal, or
// its cgroup's memory limit when that is lower (0 when unknown).
func HostMemory() uint64 {
	_, _, limit := cgroupFacts("/proc", "/sys/fs/cgroup")
	mem, _ := effectiveMemory(memTotal("/proc/meminfo"), limit)
	return mem
}

// effectiveMemory is the lower of the host's total and its cgroup limit
// (either 0 when unknown), and whether that is the limit.
func effectiveMemory(total, limit uint64) (uint64, bool) {
	if limit != 0 && (total == 0 || limit < total) {
		return limit, true
	}
	return total, false
}
