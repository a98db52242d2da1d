package preflight

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Evaluate turns facts into findings, one per check, in a fixed order.
func Evaluate(o Options, f Facts) []Finding {
	var out []Finding
	add := func(s Severity, check, format string, args ...any) {
		out = append(out, Finding{Severity: s, Check: check, Message: fmt.Sprintf(format, args...)})
	}

	// Clock.
	now := f.Now.UTC().Format(time.RFC3339)
	switch {
	case f.Now.Before(earliestSaneTime):
		add(Blocker, "clock", "the time is %s, before %s: set the clock (enable NTP, or fake-hwclock on boards without a real-time clock); certificates made now would be wrong", now, earliestSaneTime.Format("2006-01-02"))
	case f.NewestCert.After(f.Now):
		add(Blocker, "clock", "the time is %s, before %s when %s was issued: the clock went back; set it, or the API server will reject its own certificates", now, f.NewestCert.UTC().Format(time.RFC3339), f.CertFile)
	default:
		add(OK, "clock", "%s", now)
	}

	// Port.
	addr := fmt.Sprintf("%s:%d", orDefault(o.BindAddress, "0.0.0.0"), o.HTTPSPort)
	switch {
	case o.HTTPSPort == 0:
		add(OK, "port", "--https-port 0: a free port is picked at start")
	case f.PortErr == nil:
		add(OK, "port", "%s is free", addr)
	case errors.Is(f.PortErr, syscall.EADDRINUSE):
		add(Blocker, "port", "%s is in use (another edgeplane or kube-apiserver?): stop it or pass --https-port", addr)
	case errors.Is(f.PortErr, syscall.EACCES):
		add(Blocker, "port", "%s: permission denied: use a port above 1023 or run as root", addr)
	default:
		add(Blocker, "port", "cannot listen on %s: %v", addr, f.PortErr)
	}

	// Data dir.
	d := f.DataDir
	switch {
	case d.Exists && !d.IsDir:
		add(Blocker, "data-dir", "%s exists and is not a directory", d.Path)
	case d.LockedBy != "":
		add(Blocker, "data-dir", "%s is in use by a running edgeplane server (pid %s)", d.Path, d.LockedBy)
	case d.WriteErr != nil:
		add(Blocker, "data-dir", "%s is not writable (%v): fix its owner or mode, or pass another --data-dir", d.Probe, unwrap(d.WriteErr))
	case d.Exists && d.Mode&0o077 != 0:
		add(Warning, "data-dir", "%s has mode %04o: the server will tighten it to 0700", d.Path, d.Mode)
	case d.Exists:
		add(OK, "data-dir", "%s is writable, mode %04o", d.Path, d.Mode)
	default:
		add(OK, "data-dir", "%s will be created in %s (writable)", d.Path, d.Probe)
	}
	switch {
	case d.FreeErr != nil:
		add(Warning, "disk", "free space in %s unknown: %v", d.Probe, d.FreeErr)
	case d.Free < minFreeBlocker:
		add(Blocker, "disk", "%s free in %s: the datastore needs at least %s", size(d.Free), d.Probe, size(minFreeBlocker))
	case d.Free < minFreeWarning:
		add(Warning, "disk", "%s free in %s: under %s, the datastore may fill it", size(d.Free), d.Probe, size(minFreeWarning))
	default:
		add(OK, "disk", "%s free in %s", size(d.Free), d.Probe)
	}

	// Memory versus what the profile and datastore need.
	need, why := memoryNeed(o)
	mem, limited := effectiveMemory(f.MemTotal, f.MemLimit)
	where := "total"
	if limited {
		where = "cgroup limit"
	}
	switch {
	case mem == 0:
		add(Warning, "memory", "total memory unknown (no /proc/meminfo)")
	case mem < need:
		add(Warning, "memory", "%s %s, under the %s that %s needs: expect swapping or the OOM killer%s", size(mem), where, size(need), why, smallHint(o))
	default:
		add(OK, "memory", "%s %s (%s needs %s)", size(mem), where, why, size(need))
	}

	// cgroups and kernel.
	switch {
	case f.Cgroup == "":
		add(Warning, "cgroup", "no cgroup filesystem found: a kubelet on this host will not run")
	case !f.MemoryController:
		add(Warning, "cgroup", "cgroup %s without the memory controller: a kubelet on this host will not run pods (on Raspberry Pi OS add cgroup_enable=memory cgroup_memory=1 to /boot/firmware/cmdline.txt and reboot)", f.Cgroup)
	case f.Cgroup == "v1":
		add(Warning, "cgroup", "cgroup v1: Kubernetes is dropping it; boot with systemd.unified_cgroup_hierarchy=1 for cgroup v2")
	default:
		add(OK, "cgroup", "cgroup %s with the memory controller", f.Cgroup)
	}
	switch major, minor, ok := kernelVersion(f.Kernel); {
	case !ok:
		add(Warning, "kernel", "kernel version unknown (%q)", f.Kernel)
	case major < 4 || (major == 4 && minor < 19):
		add(Warning, "kernel", "kernel %s is older than 4.19, the oldest Kubernetes supports", f.Kernel)
	default:
		add(OK, "kernel", "%s", f.Kernel)
	}
	switch {
	case f.NoFile != 0 && f.NoFile < minNoFile:
		add(Warning, "limits", "open files limit %d is under %d: the systemd unit raises it (LimitNOFILE), or run ulimit -n", f.NoFile, minNoFile)
	case f.InotifyMax != 0 && f.InotifyMax < minInotify:
		add(Warning, "limits", "fs.inotify.max_user_instances is %d, under %d: raise it with sysctl", f.InotifyMax, minInotify)
	default:
		add(OK, "limits", "open files %d, inotify instances %d", f.NoFile, f.InotifyMax)
	}
	return out
}

// memoryNeed is the memory the chosen profile and datastore need.
func memoryNeed(o Options) (uint64, string) {
	need, what := uint64(minMemory), "edgeplane"
	if o.Profile != "" {
		what = "profile " + o.Profile
		if o.Profile != "small" {
			need = minMemoryDefault
		}
	}
	if o.Datastore == "etcd" {
		need += etcdExtraMemory
		what += " with etcd"
	}
	return need, what
}

func smallHint(o Options) string {
	var hints []string
	if o.Profile != "" && o.Profile != "small" {
		hints = append(hints, "--profile small")
	}
	if o.Datastore == "etcd" {
		hints = append(hints, "--datastore sqlite")
	}
	if len(hints) == 0 {
		return ""
	}
	return "; try " + strings.Join(hints, " and ")
}

func kernelVersion(release string) (major, minor int, ok bool) {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	major, err1 := strconv.Atoi(parts[0])
	minorDigits := strings.TrimRightFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' })
	minor, err2 := strconv.Atoi(minorDigits)
	return major, minor, err1 == nil && err2 == nil
}

func size(b uint64) string {
	switch {
	case b >= GiB:
		return fmt.Sprintf("%.1f GiB", float64(b)/GiB)
	default:
		return fmt.Sprintf("%d MiB", b/MiB)
	}
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func unwrap(err error) error {
	var pe interface{ Unwrap() error }
	if errors.As(err, &pe) && pe.Unwrap() != nil {
		return pe.Unwrap()
	}
	return err
}
