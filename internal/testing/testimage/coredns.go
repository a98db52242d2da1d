package testimage

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"time"
)

// DefaultCoreDNSName is the name of the CoreDNS test image.
const DefaultCoreDNSName = "docker.io/edgeplane/coredns:test"

// CoreDNSModuleDir is the directory of the CoreDNS test module (a Go module
// of its own, internal/testing/testimage/coredns, so that edgeplane's go.mod does
// not take CoreDNS's dependencies).
func CoreDNSModuleDir() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("testimage: cannot tell where the CoreDNS module is")
	}
	dir := filepath.Join(filepath.Dir(file), "coredns")
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		return "", fmt.Errorf("testimage: the CoreDNS module: %w", err)
	}
	return dir, nil
}

// BuildCoreDNS builds the static CoreDNS binary of the test module into
// outDir and returns its path and how long the build took. The Go build
// cache makes every build after the first quick; the first one compiles
// CoreDNS and client-go (minutes on a small host).
func BuildCoreDNS(ctx context.Context, outDir string) (string, time.Duration, error) {
	dir, err := CoreDNSModuleDir()
	if err != nil {
		return "", 0, err
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	out := filepath.Join(outDir, "coredns")
	cmd := exec.CommandContext(ctx, goTool, "build", "-trimpath", "-ldflags=-s -w", "-o", out, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=-mod=readonly -buildvcs=false")
	begin := time.Now()
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", 0, fmt.Errorf("testimage: building CoreDNS in %s: %w\n%s", dir, err, b)
	}
	return out, time.Since(begin), nil
}

// CoreDNS is an image around a CoreDNS binary: /coredns as the entrypoint,
// with busybox beside it for debugging. The packaged manifest passes
// -conf /etc/coredns/Corefile as its arguments.
func CoreDNS(binary string) (Image, error) {
	body, err := os.ReadFile(binary)
	if err != nil {
		return Image{}, fmt.Errorf("testimage: read CoreDNS: %w", err)
	}
	return Image{
		Name:       DefaultCoreDNSName,
		Entrypoint: []string{"/coredns"},
		Files:      []File{{Path: "coredns", Mode: 0o755, Body: body}},
	}, nil
}
