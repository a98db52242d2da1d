package e2e

import (
	"bufio"
	"context"
	"debug/buildinfo"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/edgeplane/edgeplane/internal/procfs"
	"github.com/edgeplane/edgeplane/internal/testing/testenv"
)

// qemuReadyTimeout bounds a server start under emulation (about 10x slower
// than native).
const qemuReadyTimeout = 8 * time.Minute

// qemuTarget is one platform that make dist ships and TestQEMU runs under
// qemu-user.
type qemuTarget struct {
	name     string // the subtest
	goarch   string // GOARCH, as `edgeplane version` prints it after linux/
	goarm    string // GOARM for goarch arm, else empty
	machine  elf.Machine
	class    elf.Class
	qemu     []string // the emulator's names on the PATH, first found wins
	binEnv   string   // names a prebuilt binary (make test-qemu's QEMU_<ARCH>_BINARY)
	emulator string   // in messages
}

var qemuTargets = []qemuTarget{
	{name: "arm64", goarch: "arm64", machine: elf.EM_AARCH64, class: elf.ELFCLASS64,
		qemu: []string{"qemu-aarch64-static", "qemu-aarch64"}, binEnv: "EDGEPLANE_QEMU_ARM64_BINARY", emulator: "qemu-aarch64"},
	// ARMv7 (Raspberry Pi 2, and 3/4 with a 32-bit OS): a 32-bit address
	// space, int of 32 bits, 64-bit atomics that panic unless 8-byte aligned.
	{name: "armv7", goarch: "arm", goarm: "7", machine: elf.EM_ARM, class: elf.ELFCLASS32,
		qemu: []string{"qemu-arm-static", "qemu-arm"}, binEnv: "EDGEPLANE_QEMU_ARM_BINARY", emulator: "qemu-arm"},
}

// TestQEMU proves that each cross-built binary make dist ships for a board
// (linux/arm64, linux/arm with GOARM=7) runs: under qemu-user it prints its
// version, a server reaches /readyz, and a write and read through the
// datastore (SQLite by default) succeed. It cross-builds (minutes per
// architecture on a cold cache), so it runs only with EDGEPLANE_TEST_QEMU=1
// (make test-qemu); EDGEPLANE_QEMU_ARM64_BINARY and EDGEPLANE_QEMU_ARM_BINARY
// name prebuilt binaries instead.
func TestQEMU(t *testing.T) {
	if os.Getenv("EDGEPLANE_TEST_QEMU") == "" {
		testenv.SkipByDesign(t, "qemu")
	}
	for _, tc := range qemuTargets {
		t.Run(tc.name, func(t *testing.T) {
			qemu := testenv.Tool(t, "apt-get install -y qemu-user-static", tc.qemu...)
			bin := os.Getenv(tc.binEnv)
			if bin == "" {
				bin = crossBuild(t, tc)
			}
			checkBinary(t, tc, bin)

			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			out, err := exec.CommandContext(ctx, qemu, bin, "version").CombinedOutput()
			if err != nil {
				t.Fatalf("%s edgeplane version: %v\n%s", tc.emulator, err, out)
			}
			for _, want := range []string{"edgeplane ", "commit ", "kubernetes v1.", " linux/" + tc.goarch + "\n"} {
				if !strings.Contains(string(out), want) {
					t.Fatalf("version output lacks %q:\n%s", want, out)
				}
			}
			t.Logf("under %s:\n%s", tc.emulator, out)

			runServerUnderQEMU(t, tc, qemu, bin)
		})
	}
}

// crossBuild builds cmd/edgeplane for tc as make dist does.
func crossBuild(t *testing.T, tc qemuTarget) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "edgeplane-linux-"+tc.goarch)
	ldflags, err := exec.Command("../../hack/ldflags.sh", "e2e").Output()
	if err != nil {
		t.Fatalf("hack/ldflags.sh: %v", err)
	}
	begin := time.Now()
	build := exec.Command("go", "build", "-trimpath", "-ldflags", strings.TrimSpace(string(ldflags)), "-o", bin, "../../cmd/edgeplane")
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+tc.goarch)
	if tc.goarm != "" {
		build.Env = append(build.Env, "GOARM="+tc.goarm)
	}
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("cross-build linux/%s: %v\n%s", tc.goarch, err, out)
	}
	t.Logf("cross-built linux/%s in %s", tc.goarch, time.Since(begin).Round(time.Second))
	return bin
}

// checkBinary reads the ELF header and the Go build information: an
// executable for tc's machine and word size, with no program interpreter
// (static), built with CGO_ENABLED=0 for tc's GOARCH (and GOARM).
func checkBinary(t *testing.T, tc qemuTarget, bin string) {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatalf("%s: %v", bin, err)
	}
	defer f.Close()
	if f.Machine != tc.machine || f.Class != tc.class {
		t.Fatalf("%s is for %v %v, not %v %v", bin, f.Machine, f.Class, tc.machine, tc.class)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Fatalf("%s is dynamically linked", bin)
		}
	}
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatalf("%s: Go build information: %v", bin, err)
	}
	want := map[string]string{"GOOS": "linux", "GOARCH": tc.goarch, "CGO_ENABLED": "0"}
	if tc.goarm != "" {
		want["GOARM"] = tc.goarm
	}
	got := map[string]string{}
	for _, s := range info.Settings {
		got[s.Key] = s.Value
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("%s was built with %s=%q, want %q", bin, k, got[k], v)
		}
	}
}

func runServerUnderQEMU(t *testing.T, tc qemuTarget, qemu, bin string) {
	dataDir := filepath.Join(t.TempDir(), "data")
	// A control plane: the host's containerd binary would otherwise make
	// the server a node with a containerd of its own, which a server
	// bound to loopback refuses to be.
	cmd := exec.Command(qemu, bin, "server", "--config", "", "--data-dir", dataDir, "--bind-address", "127.0.0.1", "--https-port", "0", "--disable=kubelet")
	output := &syncBuffer{}
	pr, pw := io.Pipe()
	cmd.Stdout = output
	cmd.Stderr = io.MultiWriter(output, pw)
	begin := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The emulator's RSS: the guest's memory plus qemu's own (its translated
	// code above all), so an upper bound of what the binary takes on a board.
	rss := procfs.RSSSampler(cmd.Process.Pid, 500*time.Millisecond)
	exited := make(chan error, 1)
	go func() {
		err := cmd.Wait()
		_ = pw.Close()
		exited <- err
	}()
	defer func() {
		rss.Stop()
		_ = cmd.Process.Kill()
		if t.Failed() {
			t.Logf("edgeplane under %s:\n%s", tc.emulator, tail(output.String()))
		}
	}()
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if m := readyLine.FindStringSubmatch(sc.Text()); m != nil {
				ready <- m[2]
				break
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()

	var kubeconfig string
	select {
	case kubeconfig = <-ready:
	case err := <-exited:
		t.Fatalf("edgeplane exited under %s before ready: %v", tc.emulator, err)
	case <-time.After(qemuReadyTimeout):
		t.Fatalf("edgeplane under %s not ready within %s", tc.emulator, qemuReadyTimeout)
	}
	t.Logf("ready under %s in %s; emulator RSS %d MiB (peak %d MiB)", tc.emulator,
		time.Since(begin).Round(100*time.Millisecond), rss.Current()>>20, rss.Peak()>>20)

	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Timeout = time.Minute
	client := kubernetes.NewForConfigOrDie(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var status int
	body, _ := client.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).StatusCode(&status).Raw()
	if status != 200 {
		t.Fatalf("/readyz under %s = %d: %s", tc.emulator, status, body)
	}
	// A write and a read back through the datastore, on this architecture's
	// build of its driver (modernc.org/sqlite by default).
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "qemu-" + tc.name}, Data: map[string]string{"arch": tc.goarch}}
	if _, err := client.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create a ConfigMap under %s: %v", tc.emulator, err)
	}
	got, err := client.CoreV1().ConfigMaps("default").Get(ctx, cm.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("read the ConfigMap back under %s: %v", tc.emulator, err)
	}
	if got.Data["arch"] != tc.goarch {
		t.Fatalf("the ConfigMap read back under %s holds %v, want arch=%s", tc.emulator, got.Data, tc.goarch)
	}
	logGoMemory(ctx, t, client, tc)

	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("edgeplane under %s exited with %v after SIGTERM", tc.emulator, err)
		}
	case <-time.After(3 * time.Minute):
		t.Errorf("edgeplane under %s did not stop within 3 minutes of SIGTERM", tc.emulator)
	}
	t.Logf("emulator RSS peak %d MiB", rss.Peak()>>20)
}

// logGoMemory logs the guest's own view of its memory from /metrics (the Go
// runtime's figures; the emulator's RSS adds qemu's). A figure it cannot
// read is logged as such: these are measurements, not checks.
func logGoMemory(ctx context.Context, t *testing.T, client *kubernetes.Clientset, tc qemuTarget) {
	t.Helper()
	raw, err := client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Logf("GET /metrics under %s: %v", tc.emulator, err)
		return
	}
	names := []string{"go_memstats_sys_bytes", "go_memstats_heap_inuse_bytes", "go_goroutines"}
	found := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(string(raw)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		for _, n := range names {
			if rest, ok := strings.CutPrefix(sc.Text(), n+" "); ok {
				if f, err := strconv.ParseFloat(strings.TrimSpace(rest), 64); err == nil {
					found[n] = f
				}
			}
		}
	}
	var b strings.Builder
	for _, n := range names {
		v, ok := found[n]
		switch {
		case !ok:
			fmt.Fprintf(&b, " %s=?", n)
		case strings.HasSuffix(n, "_bytes"):
			fmt.Fprintf(&b, " %s=%.0fMiB", n, v/(1<<20))
		default:
			fmt.Fprintf(&b, " %s=%.0f", n, v)
		}
	}
	t.Logf("under %s, the Go runtime's view after ready:%s", tc.emulator, b.String())
}
