package containerd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/version"
)

// ErrNoBinary: no containerd binary beside edgeplane's nor on the PATH.
var ErrNoBinary = errors.New("no containerd binary found")

// Binary is a containerd executable and its version.
type Binary struct {
	// Path is the executable; Version its version as it prints it
	// ("1.6.20~ds1").
	Path    string
	Version string
	// Where says how it was found: "beside edgeplane" or "on the PATH".
	Where string
}

// FindBinary looks for containerd beside the running edgeplane binary
// first (a release folder ships it there), then on the PATH, reads its
// version and checks that edgeplane can configure it.
func FindBinary(ctx context.Context) (*Binary, error) {
	exe, err := os.Executable()
	if err != nil {
		exe = ""
	}
	return findBinary(ctx, exe, exec.LookPath)
}

func findBinary(ctx context.Context, exe string, lookPath func(string) (string, error)) (*Binary, error) {
	var b *Binary
	if exe != "" {
		if resolved, err := filepath.EvalSymlinks(exe); err == nil {
			exe = resolved
		}
		p := filepath.Join(filepath.Dir(exe), "containerd")
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			b = &Binary{Path: p, Where: "beside edgeplane"}
		}
	}
	if b == nil {
		p, err := lookPath("containerd")
		if err != nil {
			where := "on the PATH"
			if exe != "" {
				where = "in " + filepath.Dir(exe) + " nor on the PATH"
			}
			return nil, fmt.Errorf("%w %s: install containerd (apt-get install containerd runc), or put the release folder's containerd beside edgeplane", ErrNoBinary, where)
		}
		if abs, err := filepath.Abs(p); err == nil {
			p = abs
		}
		b = &Binary{Path: p, Where: "on the PATH"}
	}
	v, err := binaryVersion(ctx, b.Path)
	if err != nil {
		return nil, err
	}
	b.Version = v
	if err := checkVersion(b.Path, v); err != nil {
		return nil, err
	}
	return b, nil
}

// binaryVersion runs `containerd --version`, which prints
// "containerd github.com/containerd/containerd 1.6.20~ds1 <revision>".
func binaryVersion(ctx context.Context, path string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", path, err)
	}
	return parseVersion(path, string(out))
}

func parseVersion(path, out string) (string, error) {
	fields := strings.Fields(out)
	if len(fields) < 3 || fields[0] != "containerd" {
		return "", fmt.Errorf("%s --version printed %q, not containerd's version line", path, strings.TrimSpace(out))
	}
	return strings.TrimPrefix(fields[2], "v"), nil
}

// checkVersion refuses what edgeplane cannot configure: it writes config
// version 2, which containerd 1.6 and 1.7 read.
func checkVersion(path, v string) error {
	parsed, err := version.ParseGeneric(v)
	if err != nil {
		return fmt.Errorf("containerd %s has version %q, which cannot be read: edgeplane configures containerd 1.6 and 1.7; pass the socket of a runtime you run yourself with --container-runtime-endpoint", path, v)
	}
	if parsed.Major() != 1 || parsed.Minor() < 6 {
		return fmt.Errorf("containerd %s is version %s: edgeplane configures containerd 1.6 and 1.7 (config version 2) only; install one of those, or run this containerd yourself and pass its socket with --container-runtime-endpoint", path, v)
	}
	return nil
}
