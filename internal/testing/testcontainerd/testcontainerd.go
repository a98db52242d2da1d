// Package testcontainerd runs a private containerd (/usr/bin/containerd) for
// one test: its own config, root, state and socket under temporary
// directories, the CRI plugin with the test pause image as sandbox image,
// and CNI configuration in a directory of the test's. Cleanup stops every
// pod it still runs, stops containerd, kills leftover shims and containers,
// and unmounts what it mounted, so the temporary directories can go.
//
//	ctd := testcontainerd.Start(t, testcontainerd.Options{Images: true})
//	// ctd.Endpoint is "unix:///tmp/ctd.../c.sock", for a CRI client or a kubelet.
//
// Tests only: the runc wrapper it installs changes the containers' OOM
// score (see runcWrapper).
package testcontainerd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/testing/testenv"
	"github.com/edgeplane/edgeplane/internal/testing/testimage"
	"github.com/edgeplane/edgeplane/pkg/airgap"
	"golang.org/x/sys/unix"
)

// Binary is the containerd the harness runs.
const Binary = "/usr/bin/containerd"

// Options configures the private containerd. The zero value works.
type Options struct {
	// CNIConfDir is where the CRI plugin reads CNI configuration; empty
	// means an empty temporary directory (pods on the host network only,
	// until a test writes a conflist there).
	CNIConfDir string
	// CNIBinDir holds the CNI plugins; empty means /opt/cni/bin when it
	// exists, else /usr/lib/cni (Debian's containernetworking-plugins).
	CNIBinDir string
	// PauseImage is the CRI sandbox image; empty means
	// testimage.DefaultPauseName.
	PauseImage string
	// Images imports the busybox and pause test images (ImportTestImages)
	// once containerd answers.
	Images bool
	// Netns is a network namespace (a name under /run/netns) to run
	// containerd in, so that pods' bridges, routes and NAT rules are the
	// test's own node's; empty means the caller's namespace. Only the
	// network namespace changes (nsenter --net): containerd stays in the
	// host's mount namespace, where the kubelet's volume mounts are.
	Netns string
	// RegistryConfigDir is the CRI plugin's registry config_path: a
	// directory of <registry host>/hosts.toml files (mirrors, say); empty
	// means none.
	RegistryConfigDir string
	// RegistryAuths are the CRI plugin's registry.configs.<host>.auth
	// entries (credentials containerd 1.6 and 1.7 use with config_path).
	RegistryAuths []RegistryAuth
	// Cgroups are cgroup.procs files (one per hierarchy) that containerd
	// joins before it starts, so that it, its shims and whatever they
	// allocate are charged there from the first page (the board
	// benchmark's cgroups); empty means the caller's cgroups.
	Cgroups []string
}

// RegistryAuth is the credentials for one registry host (host or
// host:port, as containerd dials it).
type RegistryAuth struct {
	Host, Username, Password string
}

// Containerd is a running private containerd.
type Containerd struct {
	// Socket is the gRPC socket path; Endpoint is "unix://" + Socket, the
	// form CRI clients and the kubelet take.
	Socket   string
	Endpoint string
	// Root and State are containerd's directories.
	Root  string
	State string
	// CNIConfDir and CNIBinDir are the CRI plugin's CNI directories.
	CNIConfDir string
	CNIBinDir  string
	// PauseImage is the sandbox image; BusyboxImage the workload image
	// ImportTestImages imports.
	PauseImage   string
	BusyboxImage string
	// Snapshotter is the snapshotter CRI uses (overlayfs, or native where
	// overlay cannot work).
	Snapshotter string
	// RegistryConfigDir is Options.RegistryConfigDir.
	RegistryConfigDir string
	// RegistryAuths is Options.RegistryAuths.
	RegistryAuths []RegistryAuth

	cmd    *exec.Cmd
	exited chan struct{}
	log    *syncBuffer
}

// Start starts a private containerd for t and stops it when t ends. It
// needs root and /usr/bin/containerd (apt-get install containerd runc
// containernetworking-plugins).
func Start(t testing.TB, opts Options) *Containerd {
	t.Helper()
	testenv.Require(t, "root (containerd needs it)", requireRoot())
	_, err := os.Stat(Binary)
	testenv.Require(t, "containerd (apt-get install containerd runc containernetworking-plugins)", err)
	_, err = exec.LookPath("runc")
	testenv.Require(t, "runc (apt-get install runc)", err)

	// A unix socket path must be shorter than 108 bytes: t.TempDir() can
	// be longer, so the socket and state live in a short directory.
	short, err := os.MkdirTemp("/tmp", "ctd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(short); err != nil {
			t.Errorf("testcontainerd: remove %s: %v", short, err)
		}
	})
	c, err := Launch(t.TempDir(), short, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Stop(t.Logf)
		if t.Failed() {
			t.Logf("testcontainerd: containerd log:\n%s", c.Log())
		}
	})
	if opts.Images {
		c.ImportTestImages(t)
	}
	return c
}

// Launch starts a private containerd with its root and config under dir
// and its socket and state under short (a unix socket path must stay under
// 108 bytes), and waits until it answers. It is Start for programs that
// are not tests (the benchmark); the caller calls Stop. On error nothing
// is left running.
func Launch(dir, short string, opts Options) (*Containerd, error) {
	c := &Containerd{
		Socket:       filepath.Join(short, "c.sock"),
		Root:         filepath.Join(dir, "root"),
		State:        filepath.Join(short, "state"),
		CNIConfDir:   opts.CNIConfDir,
		CNIBinDir:    opts.CNIBinDir,
		PauseImage:   opts.PauseImage,
		BusyboxImage: testimage.DefaultBusyboxName,
		exited:       make(chan struct{}),
		log:          &syncBuffer{},

		RegistryConfigDir: opts.RegistryConfigDir,
		RegistryAuths:     opts.RegistryAuths,
	}
	c.Endpoint = "unix://" + c.Socket
	if c.CNIConfDir == "" {
		c.CNIConfDir = filepath.Join(dir, "cni-conf")
	}
	if c.CNIBinDir == "" {
		c.CNIBinDir = "/usr/lib/cni"
		if _, err := os.Stat("/opt/cni/bin/bridge"); err == nil {
			c.CNIBinDir = "/opt/cni/bin"
		}
	}
	if c.PauseImage == "" {
		c.PauseImage = testimage.DefaultPauseName
	}
	c.Snapshotter = snapshotterFor(dir)
	for _, d := range []string{c.Root, c.State, c.CNIConfDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("testcontainerd: %w", err)
		}
	}
	wrapper := filepath.Join(dir, "runc-wrapper")
	if err := os.WriteFile(wrapper, []byte(runcWrapper), 0o755); err != nil {
		return nil, fmt.Errorf("testcontainerd: %w", err)
	}
	config := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(config, []byte(c.config(wrapper)), 0o600); err != nil {
		return nil, fmt.Errorf("testcontainerd: %w", err)
	}

	c.cmd = exec.Command(Binary, "--config", config, "--log-level", "info")
	if opts.Netns != "" {
		c.cmd = exec.Command("nsenter", "--net=/run/netns/"+opts.Netns, "--", Binary, "--config", config, "--log-level", "info")
	}
	if len(opts.Cgroups) > 0 {
		c.cmd = joinCgroups(c.cmd, opts.Cgroups)
	}
	c.cmd.Stdout, c.cmd.Stderr = c.log, c.log
	// Its own process group, so a test's Ctrl-C does not reach it first.
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("testcontainerd: start %s: %w", Binary, err)
	}
	go func() { _ = c.cmd.Wait(); close(c.exited) }()

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	go func() {
		select {
		case <-c.exited:
			cancel()
		case <-ctx.Done():
		}
	}()
	if _, err := airgap.WaitReady(ctx, c.Socket); err != nil {
		c.Stop(func(string, ...any) {})
		return nil, fmt.Errorf("testcontainerd: containerd did not come up: %w\ncontainerd log:\n%s", err, c.Log())
	}
	return c, nil
}

// joinCgroups wraps cmd in a shell that writes its own pid to each of
// procs (cgroup.procs files) and then execs cmd: the process starts in those
// cgroups, where a move after the start would leave what it allocated
// first charged to the old ones.
func joinCgroups(cmd *exec.Cmd, procs []string) *exec.Cmd {
	const script = `for f in $TESTCONTAINERD_CGROUPS; do echo $$ > "$f" || exit 125; done; exec "$@"`
	w := exec.Command("/bin/sh", append([]string{"-c", script, "sh", cmd.Path}, cmd.Args[1:]...)...)
	w.Env = append(os.Environ(), "TESTCONTAINERD_CGROUPS="+strings.Join(procs, " "))
	return w
}

// Log returns what containerd has logged so far.
func (c *Containerd) Log() string { return c.log.String() }

// ImportTestImages builds the busybox and pause test images (with the
// names BusyboxImage and PauseImage) and imports them through pkg/airgap,
// the pause image pinned.
func (c *Containerd) ImportTestImages(t testing.TB) airgap.Result {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "images")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	busybox, pause := testimage.Busybox(), testimage.Pause()
	busybox.Name, pause.Name = c.BusyboxImage, c.PauseImage
	for _, img := range []testimage.Image{busybox, pause} {
		if _, err := testimage.Write(dir, img); err != nil {
			t.Fatal(err)
		}
	}
	res, err := airgap.Import(context.Background(), airgap.Options{Address: c.Socket, Dir: dir, Pinned: []string{c.PauseImage}})
	if err != nil {
		t.Fatalf("testcontainerd: import the test images: %v\ncontainerd log:\n%s", err, c.Log())
	}
	return res
}

// snapshotterFor is overlayfs unless dir is on a filesystem overlay cannot
// use as upper layer (overlay itself), then native.
func snapshotterFor(dir string) string {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err == nil && st.Type == unix.OVERLAYFS_SUPER_MAGIC {
		return "native"
	}
	return "overlayfs"
}

func requireRoot() error {
	if os.Geteuid() != 0 {
		return errors.New("not root")
	}
	return nil
}

func (c *Containerd) config(wrapper string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `version = 2
root = %q
state = %q
oom_score = 0
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = %q

# containerd 1.6 serves ttrpc next to the grpc socket (shims publish
# events there), so it stays; debug and metrics listeners stay off.
[ttrpc]
  address = %q

[debug]
  address = ""

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = %q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = %q
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = %q
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
`, c.Root, c.State, c.Socket, c.Socket+".ttrpc", filepath.Join(c.Root, "opt"), c.PauseImage, c.Snapshotter,
		wrapper, c.CNIBinDir, c.CNIConfDir)
	if c.RegistryConfigDir != "" || len(c.RegistryAuths) > 0 {
		fmt.Fprintf(&b, `  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = %q
`, c.RegistryConfigDir)
	}
	for _, a := range c.RegistryAuths {
		fmt.Fprintf(&b, `    [plugins."io.containerd.grpc.v1.cri".registry.configs.%q.auth]
      username = %q
      password = %q
`, a.Host, a.Username, a.Password)
	}
	return b.String()
}

// runcWrapper is the runc runtime's BinaryName, for tests only: these test
// machines refuse to lower oom_score_adj below 0, and the kubelet gives pod
// sandboxes -998, so runc fails ("can't get final child's PID from pipe:
// EOF"). For create and run with a --bundle (or -b) it rewrites a negative
// "oomScoreAdj" in <bundle>/config.json to 0, then execs runc with the same
// arguments. Real hosts run runc itself.
const runcWrapper = `#!/bin/sh
# edgeplane internal/testing/testcontainerd: test harness only, see runcWrapper.
bundle=""
cmd=""
prev=""
for a in "$@"; do
  case "$prev" in
    --bundle|-b) bundle="$a" ;;
  esac
  case "$a" in
    --bundle=*) bundle="${a#--bundle=}" ;;
    create|run) [ -z "$cmd" ] && cmd="$a" ;;
  esac
  prev="$a"
done
if [ -n "$cmd" ] && [ -n "$bundle" ] && [ -f "$bundle/config.json" ]; then
  sed -i 's/"oomScoreAdj":-[0-9][0-9]*/"oomScoreAdj":0/' "$bundle/config.json"
fi
exec /usr/bin/runc "$@"
`

// syncBuffer is a bytes.Buffer safe for containerd's two output pipes and
// readers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
