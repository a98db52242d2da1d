package conformance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/edgeplane/edgeplane/internal/testing/testimage"
)

// KubernetesVersion is the upstream release whose suite runs: go.mod's
// k8s.io/kubernetes (the upstream module's go.mod pins the same).
const KubernetesVersion = "v1.37.2"

// Build makes everything a run needs under Dir, each part only when it is
// not there yet (remove a file to rebuild it):
//
//	bin/     e2e.test, ginkgo, and the programs the images carry
//	debs/    the Debian packages the images are made of
//	src/     the busybox source
//	images/  one OCI layout tarball per image
type Build struct {
	Dir  string
	Logf func(format string, args ...any)
}

// Artifacts are what Build made.
type Artifacts struct {
	E2ETest, Ginkgo, Kubectl string
	ImagesDir                string
}

// Paths are the artifacts of a complete build in dir.
func Paths(dir string) Artifacts {
	return Artifacts{
		E2ETest:   filepath.Join(dir, "bin", "e2e.test"),
		Ginkgo:    filepath.Join(dir, "bin", "ginkgo"),
		Kubectl:   filepath.Join(dir, "bin", "kubectl"),
		ImagesDir: filepath.Join(dir, "images"),
	}
}

func (b *Build) bin(name string) string { return filepath.Join(b.Dir, "bin", name) }

// All builds whatever is missing.
func (b *Build) All(ctx context.Context) (Artifacts, error) {
	if b.Logf == nil {
		b.Logf = func(string, ...any) {}
	}
	for _, d := range []string{"bin", "debs", "src", "images"} {
		if err := os.MkdirAll(filepath.Join(b.Dir, d), 0o755); err != nil {
			return Artifacts{}, err
		}
	}
	steps := []struct {
		out  string
		what string
		do   func(ctx context.Context, out string) error
	}{
		// The suite itself: the upstream package test binary, as
		// upstream's make WHAT=test/e2e/e2e.test builds it.
		{b.bin("e2e.test"), "e2e.test (k8s.io/kubernetes/test/e2e)", func(ctx context.Context, out string) error {
			return b.upstreamGo(ctx, "test", "-c", "-o", out, "k8s.io/kubernetes/test/e2e")
		}},
		// The kubectl the kubectl specs run (the host's may be any version).
		{b.bin("kubectl"), "kubectl (k8s.io/kubernetes/cmd/kubectl)", func(ctx context.Context, out string) error {
			return b.upstreamGo(ctx, "build", "-o", out, "k8s.io/kubernetes/cmd/kubectl")
		}},
		{b.bin("ginkgo"), "ginkgo", func(ctx context.Context, out string) error {
			return b.upstreamGo(ctx, "build", "-o", out, "github.com/onsi/ginkgo/v2/ginkgo")
		}},
		{b.bin("agnhost"), "agnhost (k8s.io/kubernetes/test/images/agnhost)", func(ctx context.Context, out string) error {
			return b.upstreamGo(ctx, "build", "-o", out, "k8s.io/kubernetes/test/images/agnhost")
		}},
		{b.bin("sample-apiserver"), "sample-apiserver (k8s.io/sample-apiserver)", func(ctx context.Context, out string) error {
			return b.upstreamGo(ctx, "build", "-o", out, "k8s.io/sample-apiserver")
		}},
		{b.bin("nnp"), "nnp (k8s.io/kubernetes/test/images/nonewprivs)", func(ctx context.Context, out string) error {
			return b.upstreamGo(ctx, "build", "-o", out, "k8s.io/kubernetes/test/images/nonewprivs")
		}},
		// etcd as edgeplane embeds it (go.mod's go.etcd.io/etcd/server/v3).
		{b.bin("etcd"), "etcd (go.etcd.io/etcd/server/v3, edgeplane's go.mod)", func(ctx context.Context, out string) error {
			return b.mainGo(ctx, "build", "-o", out, "go.etcd.io/etcd/server/v3")
		}},
		{b.bin("coredns"), "coredns (internal/testing/testimage/coredns)", func(ctx context.Context, out string) error {
			built, _, err := testimage.BuildCoreDNS(ctx, filepath.Dir(out))
			if err == nil && built != out {
				err = os.Rename(built, out)
			}
			return err
		}},
		{b.bin("busybox"), "busybox (upstream source, defconfig, static)", b.busybox},
		{b.bin("pause"), "pause (k8s.io/kubernetes build/pause/linux/pause.c, static)", b.pause},
	}
	for _, s := range steps {
		if _, err := os.Stat(s.out); err == nil {
			continue
		}
		b.Logf("building %s", s.what)
		begin := time.Now()
		tmp := s.out + ".tmp"
		if err := s.do(ctx, tmp); err != nil {
			return Artifacts{}, fmt.Errorf("build %s: %w", s.what, err)
		}
		if err := os.Rename(tmp, s.out); err != nil {
			return Artifacts{}, err
		}
		b.Logf("built %s in %s", s.what, time.Since(begin).Round(time.Second))
	}
	if err := b.images(ctx); err != nil {
		return Artifacts{}, err
	}
	return Paths(b.Dir), nil
}

// sourceDir is this package's directory, where the upstream module is.
func sourceDir() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("conformance: cannot tell where the sources are")
	}
	return filepath.Dir(file), nil
}

// upstreamGo runs the go command in the upstream module
// (test/conformance/upstream), whose go.mod takes k8s.io/kubernetes and
// its dependencies at the versions upstream's own go.mod pins.
func (b *Build) upstreamGo(ctx context.Context, args ...string) error {
	dir, err := sourceDir()
	if err != nil {
		return err
	}
	return b.goCmd(ctx, filepath.Join(dir, "upstream"), args...)
}

// mainGo runs the go command in edgeplane's own module.
func (b *Build) mainGo(ctx context.Context, args ...string) error {
	dir, err := sourceDir()
	if err != nil {
		return err
	}
	return b.goCmd(ctx, filepath.Join(dir, "..", ".."), args...)
}

func (b *Build) goCmd(ctx context.Context, dir string, args ...string) error {
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	// -trimpath and no symbol table: smaller binaries; file:line stays.
	// The Kubernetes version stamped as upstream's release build does
	// (an unstamped e2e.test and kubectl report v0.0.0-master).
	full := append([]string{args[0], "-trimpath", "-ldflags=-s -w" + versionStamp()}, args[1:]...)
	cmd := exec.CommandContext(ctx, goTool, full...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=-mod=readonly -buildvcs=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %s (in %s): %v\n%s", strings.Join(full, " "), dir, err, out)
	}
	return nil
}

// versionStamp is the -X flags that stamp KubernetesVersion.
func versionStamp() string {
	v := strings.TrimPrefix(KubernetesVersion, "v")
	parts := strings.SplitN(v, ".", 3)
	var s string
	for _, pkg := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
		s += fmt.Sprintf(" -X %[1]s.gitVersion=%[2]s -X %[1]s.gitMajor=%[3]s -X %[1]s.gitMinor=%[4]s -X %[1]s.gitTreeState=clean",
			pkg, KubernetesVersion, parts[0], parts[1])
	}
	return s
}

// upstreamModuleDir is where the go command keeps k8s.io/kubernetes's
// source (build/pause, the test images' files).
func (b *Build) upstreamModuleDir(ctx context.Context) (string, error) {
	dir, err := sourceDir()
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "k8s.io/kubernetes")
	cmd.Dir = filepath.Join(dir, "upstream")
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go list -m k8s.io/kubernetes: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// pause builds upstream's pause.c as upstream's build/pause Makefile does.
func (b *Build) pause(ctx context.Context, out string) error {
	mod, err := b.upstreamModuleDir(ctx)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "gcc", "-Os", "-Wall", "-Werror", "-static", "-DVERSION=v3.10.2-edgeplane",
		"-o", out, filepath.Join(mod, "build", "pause", "linux", "pause.c"))
	if o, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("gcc pause.c: %v\n%s(apt-get install gcc libc6-dev)", err, o)
	}
	return nil
}
