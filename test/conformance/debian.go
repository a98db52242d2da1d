package conformance

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// Debian fetches Debian packages with apt, the machine's own sources (the
// images' userlands are the host distribution's packages), and unpacks them
// into layers. Maintainer scripts do not run: an image gets the packages'
// files, and the few files their scripts would make (/etc/passwd...) are
// written by the image's recipe.
type Debian struct {
	// Dir caches the downloaded .deb files.
	Dir string
	// Logf reports progress.
	Logf func(format string, args ...any)
}

// notWanted are packages the resolver pulls in that an image needs none of:
// the usr-merge converter (and the perl it needs), the package tools.
var notWanted = map[string]bool{
	"usrmerge": true, "perl": true, "perl-modules-5.36": true, "libperl5.36": true,
	"libfile-find-rule-perl": true, "libnumber-compare-perl": true, "libtext-glob-perl": true,
	"dpkg": true, "debconf": true, "init-system-helpers": true,
}

// Resolve lists the packages an installation of pkgs takes on an empty
// system (apt's own resolver, recommendations off), less notWanted.
func (d *Debian) Resolve(ctx context.Context, pkgs ...string) ([]string, error) {
	args := append([]string{"-o", "Dir::State::status=/dev/null", "-o", "APT::Install-Recommends=0",
		"-o", "Debug::NoLocking=1", "--simulate", "install"}, pkgs...)
	out, err := exec.CommandContext(ctx, "apt-get", args...).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("apt-get --simulate install %s: %v\n%s\n(run apt-get update once)", strings.Join(pkgs, " "), err, out)
	}
	var list []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "Inst" && !notWanted[f[1]] {
			list = append(list, f[1])
		}
	}
	if len(list) == 0 {
		return nil, fmt.Errorf("apt-get resolved no package for %s:\n%s", strings.Join(pkgs, " "), out)
	}
	sort.Strings(list)
	return list, nil
}

// Download fetches the .deb files of pkgs into Dir (those already there are
// kept) and returns their paths.
func (d *Debian) Download(ctx context.Context, pkgs []string) ([]string, error) {
	if err := os.MkdirAll(d.Dir, 0o755); err != nil {
		return nil, err
	}
	var missing []string
	paths := map[string]string{}
	for _, p := range pkgs {
		if m, _ := filepath.Glob(filepath.Join(d.Dir, p+"_*.deb")); len(m) == 1 {
			paths[p] = m[0]
		} else {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		d.Logf("apt-get download %d packages", len(missing))
		cmd := exec.CommandContext(ctx, "apt-get", append([]string{"-o", "Debug::NoLocking=1", "download"}, missing...)...)
		cmd.Dir = d.Dir
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("apt-get download: %v\n%s", err, out)
		}
		for _, p := range missing {
			m, _ := filepath.Glob(filepath.Join(d.Dir, p+"_*.deb"))
			if len(m) != 1 {
				return nil, fmt.Errorf("apt-get download left %d files for %s in %s", len(m), p, d.Dir)
			}
			paths[p] = m[0]
		}
	}
	out := make([]string, 0, len(pkgs))
	for _, p := range pkgs {
		out = append(out, paths[p])
	}
	return out, nil
}

// skipDocs leaves out what no container reads: documentation, manual pages,
// translations.
func skipDocs(p string) bool {
	for _, pre := range []string{"usr/share/doc/", "usr/share/man/", "usr/share/info/", "usr/share/locale/", "usr/share/lintian/"} {
		if strings.HasPrefix(p+"/", pre) {
			return true
		}
	}
	return false
}

// Rootfs resolves pkgs, downloads them and unpacks them into a new layer.
func (d *Debian) Rootfs(ctx context.Context, pkgs ...string) (*Rootfs, error) {
	list, err := d.Resolve(ctx, pkgs...)
	if err != nil {
		return nil, err
	}
	debs, err := d.Download(ctx, list)
	if err != nil {
		return nil, err
	}
	r := NewRootfs()
	for _, deb := range debs {
		cmd := exec.CommandContext(ctx, "dpkg-deb", "--fsys-tarfile", deb)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("dpkg-deb: %w", err)
		}
		if err := r.AddTar(out, skipDocs); err != nil {
			_ = cmd.Wait()
			return nil, fmt.Errorf("unpack %s: %w", filepath.Base(deb), err)
		}
		if err := cmd.Wait(); err != nil {
			return nil, fmt.Errorf("dpkg-deb --fsys-tarfile %s: %v: %s", deb, err, stderr.String())
		}
	}
	for _, a := range alternatives {
		if r.Has(a.target) && !r.Has(a.link) {
			r.Symlink(a.link, "/"+a.target)
		}
	}
	return r, nil
}

// alternatives are the links the packages' maintainer scripts make
// (update-alternatives, dash's /bin/sh), which an unpacked package lacks.
var alternatives = []struct{ link, target string }{
	{"bin/nc", "bin/nc.openbsd"},
	{"bin/netcat", "bin/nc.openbsd"},
	{"usr/bin/awk", "usr/bin/mawk"},
	{"bin/sh", "bin/dash"},
}
