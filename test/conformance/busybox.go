package conformance

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// busybox builds busybox from its upstream source (the original tarball of
// the host distribution's source package, fetched with apt-get source),
// with upstream's default configuration, static. Not Debian's busybox
// binary: Debian's ash drops environment variables whose names are not
// shell names (a patch of theirs reverts upstream's change that keeps
// them), and the [Conformance] specs that consume ConfigMaps and Secrets
// as environment with a prefix such as "p-" run `sh -c env` in the busybox
// image and expect p-data-1=value-1.
func (b *Build) busybox(ctx context.Context, out string) error {
	src := filepath.Join(b.Dir, "src")
	tarballs, _ := filepath.Glob(filepath.Join(src, "busybox_*.orig.tar.*"))
	if len(tarballs) == 0 {
		apt, err := b.sourceApt(ctx)
		if err != nil {
			return err
		}
		cmd := exec.CommandContext(ctx, "apt-get", append(apt, "source", "--download-only", "busybox")...)
		cmd.Dir = src
		if o, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("apt-get source busybox: %v\n%s", err, o)
		}
		tarballs, _ = filepath.Glob(filepath.Join(src, "busybox_*.orig.tar.*"))
		if len(tarballs) != 1 {
			return fmt.Errorf("apt-get source busybox left %d original tarballs in %s", len(tarballs), src)
		}
	}
	work, err := os.MkdirTemp(src, "busybox-build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	script := `set -e
tar -xf "$1" --strip-components=1
make defconfig >/dev/null
sed -i 's/^# CONFIG_STATIC is not set$/CONFIG_STATIC=y/' .config
grep -q '^CONFIG_STATIC=y$' .config
make -j"$(nproc)" busybox >build.log 2>&1 || { tail -50 build.log; exit 1; }
`
	cmd := exec.CommandContext(ctx, "sh", "-c", script, "sh", tarballs[0])
	cmd.Dir = work
	if o, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build busybox from %s: %v\n%s(apt-get install gcc make libc6-dev bzip2)", tarballs[0], err, o)
	}
	return os.Rename(filepath.Join(work, "busybox"), out)
}

// sourceApt is apt-get's options for a private configuration with the
// source ("deb-src") lines of the host's own Debian entries: apt-get source
// needs them and the host may have none. Only entries for the host's
// release (os-release's VERSION_CODENAME) are taken.
func (b *Build) sourceApt(ctx context.Context) ([]string, error) {
	codename, err := osRelease("VERSION_CODENAME")
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(b.Dir, "src", "apt")
	lists := filepath.Join(dir, "lists")
	if err := os.MkdirAll(filepath.Join(lists, "partial"), 0o755); err != nil {
		return nil, err
	}
	var out strings.Builder
	files, _ := filepath.Glob("/etc/apt/sources.list.d/*.sources")
	for _, f := range files {
		body, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		for _, stanza := range strings.Split(string(body), "\n\n") {
			if !deb822HasSuite(stanza, codename) {
				continue
			}
			lines := strings.Split(stanza, "\n")
			for i, l := range lines {
				if strings.HasPrefix(l, "Types:") {
					lines[i] = "Types: deb-src"
				}
			}
			out.WriteString(strings.Join(lines, "\n") + "\n\n")
		}
	}
	legacy := []string{"/etc/apt/sources.list"}
	more, _ := filepath.Glob("/etc/apt/sources.list.d/*.list")
	for _, f := range append(legacy, more...) {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 3 || fields[0] != "deb" {
				continue
			}
			// deb [options] uri suite components...
			i := 1
			if strings.HasPrefix(fields[1], "[") {
				for i < len(fields) && !strings.HasSuffix(fields[i], "]") {
					i++
				}
				i++
			}
			if i+1 < len(fields) && fields[i+1] == codename {
				out.WriteString("deb-src " + strings.Join(fields[1:], " ") + "\n")
			}
		}
		fh.Close()
	}
	if out.Len() == 0 {
		return nil, fmt.Errorf("no apt source for %s in /etc/apt to take the busybox source from", codename)
	}
	sources := filepath.Join(dir, "sources.sources")
	if err := os.WriteFile(sources, []byte(out.String()), 0o644); err != nil {
		return nil, err
	}
	opts := []string{
		"-o", "Dir::Etc::SourceList=/dev/null", "-o", "Dir::Etc::SourceParts=" + dir,
		"-o", "Dir::State::Lists=" + lists, "-o", "Dir::State::status=/dev/null", "-o", "Debug::NoLocking=1",
	}
	if _, err := os.Stat(filepath.Join(dir, "updated")); err != nil {
		cmd := exec.CommandContext(ctx, "apt-get", append(opts, "update")...)
		if o, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("apt-get update (source lists in %s): %v\n%s", dir, err, o)
		}
		if err := os.WriteFile(filepath.Join(dir, "updated"), nil, 0o644); err != nil {
			return nil, err
		}
	}
	return opts, nil
}

func deb822HasSuite(stanza, codename string) bool {
	for _, l := range strings.Split(stanza, "\n") {
		if v, ok := strings.CutPrefix(l, "Suites:"); ok {
			for _, s := range strings.Fields(v) {
				if s == codename {
					return true
				}
			}
		}
	}
	return false
}

// osRelease reads a key of /etc/os-release.
func osRelease(key string) (string, error) {
	body, err := os.ReadFile("/etc/os-release")
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(l, key+"="); ok {
			return strings.Trim(v, `"`), nil
		}
	}
	return "", fmt.Errorf("/etc/os-release has no %s", key)
}
