package criruntime

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-client/pkg/fake"
	"k8s.io/klog/v2/ktesting"
)

// shortDir is a temporary directory short enough for unix socket paths
// (under 108 bytes), removed when t ends.
func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "cri")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// startFake serves the kubelet's fake CRI runtime on a socket in a
// temporary directory; setup runs before the first call reaches it.
func startFake(t *testing.T, setup func(*fake.RemoteRuntime)) string {
	t.Helper()
	sock := filepath.Join(shortDir(t), "cri.sock")
	f := fake.NewFakeRemoteRuntime()
	if err := f.Start("unix://" + sock); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Stop)
	if setup != nil {
		f.RuntimeService.Lock()
		setup(f)
		f.RuntimeService.Unlock()
	}
	return sock
}

// deadSocket leaves a socket file that nothing listens on, as a runtime
// that was killed leaves it.
func deadSocket(t *testing.T) string {
	t.Helper()
	sock := filepath.Join(shortDir(t), "dead.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return sock
}

// silentSocket accepts connections and never answers, as a hung runtime.
func silentSocket(t *testing.T) string {
	t.Helper()
	sock := filepath.Join(shortDir(t), "silent.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				_ = c.Close()
			}
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() { _ = l.Close(); <-done })
	return sock
}

func TestDetectLive(t *testing.T) {
	systemd := func(f *fake.RemoteRuntime) {
		f.RuntimeService.FakeLinuxConfiguration = &runtimeapi.LinuxRuntimeConfiguration{CgroupDriver: runtimeapi.CgroupDriver_SYSTEMD}
	}
	tests := []struct {
		name string
		// setup changes the fake before it is asked.
		setup func(*fake.RemoteRuntime)
		// search builds the search list from the live socket; nil means
		// Detect is given the socket as its endpoint.
		search       func(t *testing.T, live string) []string
		endpoint     func(live string) string
		wantDriver   string
		wantReady    bool
		wantWarnings []string
	}{
		{
			name:       "explicit unix endpoint, systemd driver",
			setup:      systemd,
			endpoint:   func(live string) string { return "unix://" + live },
			wantDriver: "systemd", wantReady: true,
			wantWarnings: []string{`CRI API version "0.1.0"`},
		},
		{
			name: "bare socket path, cgroupfs driver",
			setup: func(f *fake.RemoteRuntime) {
				f.RuntimeService.FakeLinuxConfiguration = &runtimeapi.LinuxRuntimeConfiguration{CgroupDriver: runtimeapi.CgroupDriver_CGROUPFS}
			},
			endpoint:   func(live string) string { return live },
			wantDriver: "cgroupfs", wantReady: true,
			wantWarnings: []string{`CRI API version "0.1.0"`},
		},
		{
			name: "runtime too old for RuntimeConfig",
			setup: func(f *fake.RemoteRuntime) {
				f.RuntimeService.Errors["RuntimeConfig"] = []error{status.Error(codes.Unimplemented, "unknown method RuntimeConfig")}
			},
			endpoint:   func(live string) string { return "unix://" + live },
			wantDriver: CgroupDriverUnknown, wantReady: true,
			wantWarnings: []string{`CRI API version "0.1.0"`},
		},
		{
			name: "runtime not ready",
			setup: func(f *fake.RemoteRuntime) {
				systemd(f)
				f.RuntimeService.FakeStatus = &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
					{Type: runtimeapi.RuntimeReady, Status: false, Reason: "Starting", Message: "plugins loading"},
					{Type: runtimeapi.NetworkReady, Status: false, Reason: "NetworkPluginNotReady"},
				}}
			},
			endpoint:   func(live string) string { return "unix://" + live },
			wantDriver: "systemd", wantReady: false,
			wantWarnings: []string{"not ready: RuntimeReady=false (Starting plugins loading)", `CRI API version "0.1.0"`},
		},
		{
			name:  "search skips missing and dead sockets",
			setup: systemd,
			search: func(t *testing.T, live string) []string {
				return []string{filepath.Join(t.TempDir(), "missing.sock"), deadSocket(t), live}
			},
			wantDriver: "systemd", wantReady: true,
			wantWarnings: []string{`CRI API version "0.1.0"`},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			live := startFake(t, tc.setup)
			var rt *Runtime
			var err error
			if tc.search != nil {
				rt, err = detect(ctx, "", tc.search(t, live), answerTimeout)
			} else {
				rt, err = Detect(ctx, tc.endpoint(live))
			}
			if err != nil {
				t.Fatalf("Detect: %v", err)
			}
			if rt.Endpoint != "unix://"+live {
				t.Errorf("Endpoint %q, want %q", rt.Endpoint, "unix://"+live)
			}
			if rt.Name != "fakeRuntime" || rt.Version != "0.1.0" || rt.APIVersion != "0.1.0" || !rt.Supported {
				t.Errorf("got %s %s API %s supported %t, want fakeRuntime 0.1.0 API 0.1.0 supported", rt.Name, rt.Version, rt.APIVersion, rt.Supported)
			}
			if rt.CgroupDriver != tc.wantDriver {
				t.Errorf("CgroupDriver %q, want %q", rt.CgroupDriver, tc.wantDriver)
			}
			ready, ok := rt.Condition(runtimeapi.RuntimeReady)
			if !ok || ready.Status != tc.wantReady {
				t.Errorf("RuntimeReady %+v (found %t), want status %t; conditions %v", ready, ok, tc.wantReady, rt.Conditions)
			}
			if _, ok := rt.Condition(runtimeapi.NetworkReady); !ok {
				t.Errorf("no NetworkReady condition in %v", rt.Conditions)
			}
			if len(rt.Warnings) != len(tc.wantWarnings) {
				t.Fatalf("warnings %q, want %d: %q", rt.Warnings, len(tc.wantWarnings), tc.wantWarnings)
			}
			for i, w := range tc.wantWarnings {
				if !strings.Contains(rt.Warnings[i], w) {
					t.Errorf("warning %d is %q, want it to say %q", i, rt.Warnings[i], w)
				}
			}
		})
	}
}

func TestDetectErrors(t *testing.T) {
	tests := []struct {
		name string
		// endpoint and search are what detect is given; search nil means
		// the public Detect (with its own search list when endpoint is "").
		endpoint func(t *testing.T) string
		search   func(t *testing.T) []string
		want     error
		// wantSaid are parts of the message the user needs.
		wantSaid []string
		within   time.Duration
	}{
		{
			name:     "nothing in the search paths",
			endpoint: func(*testing.T) string { return "" },
			search: func(t *testing.T) []string {
				d := t.TempDir()
				return []string{filepath.Join(d, "containerd.sock"), filepath.Join(d, "crio.sock")}
			},
			want:     ErrNoRuntime,
			wantSaid: []string{"containerd.sock, ", "crio.sock", "apt-get install containerd", "--container-runtime-endpoint"},
		},
		{
			name:     "given socket missing",
			endpoint: func(t *testing.T) string { return "unix://" + filepath.Join(t.TempDir(), "nope.sock") },
			want:     ErrNoRuntime,
			wantSaid: []string{"nope.sock", "--container-runtime-endpoint"},
		},
		{
			name:     "given a tcp endpoint",
			endpoint: func(*testing.T) string { return "tcp://127.0.0.1:1234" },
			want:     ErrNoRuntime,
			wantSaid: []string{"not a unix socket", "unix:///run/containerd/containerd.sock"},
		},
		{
			name:     "given a relative path",
			endpoint: func(*testing.T) string { return "run/containerd.sock" },
			want:     ErrNoRuntime,
			wantSaid: []string{"not an absolute socket path"},
		},
		{
			name: "given a regular file",
			endpoint: func(t *testing.T) string {
				p := filepath.Join(t.TempDir(), "file.sock")
				if err := os.WriteFile(p, nil, 0o600); err != nil {
					t.Fatal(err)
				}
				return p
			},
			want:     ErrNoRuntime,
			wantSaid: []string{"file.sock is not a socket"},
		},
		{
			name:     "socket file nothing listens on",
			endpoint: func(t *testing.T) string { return "unix://" + deadSocket(t) },
			want:     ErrRuntimeDead,
			wantSaid: []string{"dead.sock exists", "connection refused", "systemctl status containerd"},
			within:   2 * time.Second,
		},
		{
			name:     "socket that accepts and never answers",
			endpoint: func(t *testing.T) string { return silentSocket(t) },
			want:     ErrRuntimeDead,
			wantSaid: []string{"silent.sock exists", "nothing answered within 5s", "systemctl status containerd"},
			within:   answerTimeout + 5*time.Second,
		},
		{
			name:     "every socket found is dead",
			endpoint: func(*testing.T) string { return "" },
			search: func(t *testing.T) []string {
				return []string{deadSocket(t), filepath.Join(t.TempDir(), "missing.sock"), deadSocket(t)}
			},
			want:     ErrRuntimeDead,
			wantSaid: []string{"none of ", "dead.sock, ", "connection refused"},
			within:   2 * time.Second,
		},
		{
			name: "runtime without CRI v1",
			endpoint: func(t *testing.T) string {
				return startFake(t, func(f *fake.RemoteRuntime) {
					f.RuntimeService.Errors["Version"] = []error{status.Error(codes.Unimplemented, "unknown service runtime.v1.RuntimeService")}
				})
			},
			want:     ErrUnsupported,
			wantSaid: []string{"not CRI v1", "upgrade the runtime"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			endpoint := tc.endpoint(t)
			begin := time.Now()
			var rt *Runtime
			var err error
			if tc.search != nil {
				rt, err = detect(ctx, endpoint, tc.search(t), answerTimeout)
			} else {
				rt, err = Detect(ctx, endpoint)
			}
			took := time.Since(begin)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Detect: %v (runtime %+v), want %v", err, rt, tc.want)
			}
			for _, s := range tc.wantSaid {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
			switch {
			case tc.want == ErrUnsupported && (rt == nil || rt.Supported):
				t.Errorf("runtime %+v, want one that is not Supported", rt)
			case tc.want != ErrUnsupported && rt != nil:
				t.Errorf("runtime %+v with the error, want nil", rt)
			}
			if tc.within != 0 && took > tc.within {
				t.Errorf("took %s, want the answer within %s", took, tc.within)
			}
			t.Logf("after %s: %v", took.Round(time.Millisecond), err)
		})
	}
}

func TestVersionWarnings(t *testing.T) {
	tests := []struct {
		rt   Runtime
		want []string
	}{
		{Runtime{Name: "containerd", Version: "1.6.20~ds1", APIVersion: "v1"}, []string{"containerd 1.6.20~ds1 is older than 1.7"}},
		{Runtime{Name: "containerd", Version: "v1.6.36", APIVersion: "v1"}, []string{"older than 1.7"}},
		{Runtime{Name: "containerd", Version: "1.7.27", APIVersion: "v1"}, nil},
		{Runtime{Name: "containerd", Version: "v2.1.4", APIVersion: "v1"}, nil},
		{Runtime{Name: "containerd", Version: "weird", APIVersion: "v1"}, []string{`version "weird" cannot be read`}},
		{Runtime{Name: "cri-o", Version: "1.30.0", APIVersion: "v1"}, nil},
		{Runtime{Name: "cri-o", Version: "1.30.0", APIVersion: "v1alpha2"}, []string{`"v1alpha2"`}},
	}
	for _, tc := range tests {
		t.Run(tc.rt.Name+" "+tc.rt.Version+" "+tc.rt.APIVersion, func(t *testing.T) {
			got := versionWarnings(&tc.rt)
			if len(got) != len(tc.want) {
				t.Fatalf("warnings %q, want %d like %q", got, len(tc.want), tc.want)
			}
			for i := range tc.want {
				if !strings.Contains(got[i], tc.want[i]) {
					t.Errorf("warning %q, want it to say %q", got[i], tc.want[i])
				}
			}
		})
	}
}
