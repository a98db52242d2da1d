// Package criruntime finds the node's container runtime (its CRI socket)
// and describes it: name, version, CRI API version, cgroup driver and
// status conditions, with warnings about what is too old.
//
// Detect answers quickly in every case: a socket that nobody listens on is
// reported at once (connection refused), one that accepts but does not speak
// CRI within answerTimeout is reported after it.
package criruntime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/version"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"
	"k8s.io/klog/v2"
)

// Errors of Detect, for errors.Is; the returned errors wrap one of them with
// what was tried and what to do.
var (
	// ErrNoRuntime: no CRI socket exists where one was looked for.
	ErrNoRuntime = errors.New("no container runtime found")
	// ErrRuntimeDead: a socket file exists but nothing answers on it.
	ErrRuntimeDead = errors.New("the container runtime does not answer")
	// ErrUnsupported: something answers on the socket, but not the CRI v1
	// API that this kubelet speaks.
	ErrUnsupported = errors.New("the container runtime does not serve the CRI v1 API")
)

// CgroupDriverUnknown is Runtime.CgroupDriver when the runtime is too old to
// tell (containerd 1.6 has no RuntimeConfig call).
const CgroupDriverUnknown = "unknown (runtime too old to say; the kubelet uses its configured driver)"

// answerTimeout is how long a runtime has to answer each call.
const answerTimeout = 5 * time.Second

// searchPaths are the sockets Detect looks for when given no endpoint, in
// order: containerd (the distribution's package or upstream's), k3s's
// bundled containerd, CRI-O.
func searchPaths() []string {
	return []string{
		"/run/containerd/containerd.sock",
		"/run/k3s/containerd/containerd.sock",
		"/var/run/crio/crio.sock",
		"/run/crio/crio.sock",
	}
}

// Condition is one of the runtime's status conditions (RuntimeReady,
// NetworkReady).
type Condition struct {
	Type    string
	Status  bool
	Reason  string
	Message string
}

func (c Condition) String() string {
	s := fmt.Sprintf("%s=%t", c.Type, c.Status)
	if !c.Status && (c.Reason != "" || c.Message != "") {
		s += fmt.Sprintf(" (%s)", strings.TrimSpace(c.Reason+" "+c.Message))
	}
	return s
}

// Runtime describes a container runtime that answered.
type Runtime struct {
	// Endpoint is its socket as the kubelet takes it: unix:///path.
	Endpoint string
	// Name and Version are the runtime's ("containerd", "1.6.20~ds1");
	// APIVersion is the CRI API version it reports ("v1").
	Name       string
	Version    string
	APIVersion string
	// CgroupDriver is "systemd", "cgroupfs", or CgroupDriverUnknown.
	CgroupDriver string
	// SandboxImage is the pause image the runtime is configured with
	// (containerd's sandbox_image, from its verbose CRI status); "" when
	// it does not say.
	SandboxImage string
	Conditions   []Condition
	// Supported: it serves the CRI v1 API, which this kubelet needs.
	Supported bool
	// Warnings are what works but should be fixed, one sentence each.
	Warnings []string
}

// Condition returns the condition of that type, and whether there is one.
func (r *Runtime) Condition(typ string) (Condition, bool) {
	for _, c := range r.Conditions {
		if c.Type == typ {
			return c, true
		}
	}
	return Condition{}, false
}

// Detect finds the container runtime and describes it. endpoint is a CRI
// socket, unix:///path or /path; "" searches the usual sockets in order
// (containerd's, k3s's containerd, CRI-O's) and takes the first that answers.
//
// The error wraps ErrNoRuntime, ErrRuntimeDead or ErrUnsupported. With
// ErrUnsupported the Runtime is returned too (Supported false), for
// reporting; otherwise it is nil on error.
func Detect(ctx context.Context, endpoint string) (*Runtime, error) {
	return detect(ctx, endpoint, searchPaths(), answerTimeout)
}

func detect(ctx context.Context, endpoint string, search []string, timeout time.Duration) (*Runtime, error) {
	logger := klog.FromContext(ctx)
	if endpoint != "" {
		path, err := socketPath(endpoint)
		if err != nil {
			return nil, err
		}
		if err := isSocket(path); err != nil {
			return nil, fmt.Errorf("%w: %v: start the runtime (systemctl start containerd) or pass the socket it listens on with --container-runtime-endpoint", ErrNoRuntime, err)
		}
		return describe(ctx, path, timeout)
	}

	var found []string
	var dead []error
	for _, path := range search {
		if err := isSocket(path); err != nil {
			logger.V(4).Info("No CRI socket here", "path", path, "err", err)
			continue
		}
		found = append(found, path)
		rt, err := describe(ctx, path, timeout)
		if err == nil || errors.Is(err, ErrUnsupported) {
			return rt, err
		}
		logger.V(2).Info("A CRI socket does not answer; trying the next one", "path", path, "err", err)
		dead = append(dead, err)
		if ctx.Err() != nil {
			break
		}
	}
	if len(found) == 0 {
		return nil, fmt.Errorf("%w: no socket at %s: install one (apt-get install containerd), or pass the socket of yours with --container-runtime-endpoint",
			ErrNoRuntime, strings.Join(search, ", "))
	}
	if len(dead) == 1 {
		return nil, dead[0]
	}
	return nil, fmt.Errorf("%w: none of %s answers: %w", ErrRuntimeDead, strings.Join(found, ", "), errors.Join(dead...))
}

// socketPath is the file of a unix:// endpoint (or of a bare path).
func socketPath(endpoint string) (string, error) {
	path := endpoint
	if scheme, rest, ok := strings.Cut(endpoint, "://"); ok {
		if scheme != "unix" {
			return "", fmt.Errorf("%w: endpoint %q is not a unix socket: give unix:///run/containerd/containerd.sock or a socket path", ErrNoRuntime, endpoint)
		}
		path = rest
	}
	if !filepath.IsAbs(path) {
		return "", fmt.Errorf("%w: endpoint %q is not an absolute socket path: give unix:///run/containerd/containerd.sock or a socket path", ErrNoRuntime, endpoint)
	}
	return filepath.Clean(path), nil
}

// isSocket tells why path is not a socket file (nil when it is one).
func isSocket(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("no socket at %s", path)
		}
		return err
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("%s is not a socket (%s)", path, fi.Mode().Type())
	}
	return nil
}

// describe connects to the socket at path and asks the runtime about
// itself.
func describe(ctx context.Context, path string, timeout time.Duration) (*Runtime, error) {
	logger := klog.FromContext(ctx)
	endpoint := "unix://" + path

	// Connection refused is known at once; gRPC would keep retrying it
	// until the timeout.
	conn, err := (&net.Dialer{Timeout: timeout}).DialContext(ctx, "unix", path)
	if err != nil {
		return nil, deadError(path, timeout, err)
	}
	_ = conn.Close()

	// cri-client logs every failed call as an error; the failures here are
	// answers (and returned), so its own logging is discarded.
	quiet := logr.NewContext(ctx, logr.Discard())
	svc, err := remote.NewRemoteRuntimeServiceBuilder().
		WithEndpoint(endpoint).
		WithConnectionTimeout(timeout).
		WithTracerProvider(nil).
		Build(quiet)
	if err != nil {
		if status.Code(err) == codes.Unimplemented {
			return &Runtime{Endpoint: endpoint}, fmt.Errorf("%w: %s answers, but not CRI v1 (%v): upgrade the runtime (containerd 1.7 or later, CRI-O 1.26 or later)", ErrUnsupported, path, err)
		}
		return nil, deadError(path, timeout, err)
	}
	defer func() { _ = svc.Close(quiet) }()

	v, err := svc.Version(quiet, "v1")
	if err != nil {
		return nil, deadError(path, timeout, err)
	}
	rt := &Runtime{
		Endpoint:   endpoint,
		Name:       v.RuntimeName,
		Version:    v.RuntimeVersion,
		APIVersion: v.RuntimeApiVersion,
		Supported:  true,
	}

	st, err := svc.Status(quiet, true)
	switch {
	case err != nil:
		rt.Warnings = append(rt.Warnings, fmt.Sprintf("the runtime's status is unknown (%v)", err))
	case st.GetStatus() != nil:
		for _, c := range st.GetStatus().GetConditions() {
			rt.Conditions = append(rt.Conditions, Condition{Type: c.Type, Status: c.Status, Reason: c.Reason, Message: c.Message})
		}
	}
	rt.SandboxImage = sandboxImage(st.GetInfo())
	if c, ok := rt.Condition(runtimeapi.RuntimeReady); ok && !c.Status {
		rt.Warnings = append(rt.Warnings, "the runtime says it is not ready: "+c.String())
	}

	rc, err := svc.RuntimeConfig(quiet)
	switch {
	case status.Code(err) == codes.Unimplemented:
		rt.CgroupDriver = CgroupDriverUnknown
	case err != nil:
		rt.CgroupDriver = fmt.Sprintf("unknown (the runtime did not say: %v)", err)
	case rc.GetLinux() == nil:
		rt.CgroupDriver = "unknown (the runtime did not say)"
	default:
		rt.CgroupDriver = cgroupDriverName(rc.GetLinux().GetCgroupDriver())
	}

	rt.Warnings = append(rt.Warnings, versionWarnings(rt)...)
	logger.V(2).Info("Found the container runtime", "endpoint", endpoint, "name", rt.Name, "version", rt.Version,
		"apiVersion", rt.APIVersion, "cgroupDriver", rt.CgroupDriver)
	return rt, nil
}

// sandboxImage reads the sandbox image from a verbose CRI status:
// containerd (1.6, 1.7) puts its CRI configuration, sandboxImage among it,
// under "config". Another runtime gives "".
func sandboxImage(info map[string]string) string {
	var config struct {
		SandboxImage string `json:"sandboxImage"`
	}
	if err := json.Unmarshal([]byte(info["config"]), &config); err != nil {
		return ""
	}
	return config.SandboxImage
}

func cgroupDriverName(d runtimeapi.CgroupDriver) string {
	switch d {
	case runtimeapi.CgroupDriver_SYSTEMD:
		return "systemd"
	case runtimeapi.CgroupDriver_CGROUPFS:
		return "cgroupfs"
	}
	return fmt.Sprintf("unknown (%s)", d)
}

// deadError is ErrRuntimeDead for the socket at path, with how to look at
// the runtime behind it.
func deadError(path string, timeout time.Duration, err error) error {
	why := "nothing answered within " + timeout.String()
	if errors.Is(err, syscall.ECONNREFUSED) {
		why = "connection refused: nothing listens on it"
	}
	service := "containerd"
	if strings.Contains(path, "crio") {
		service = "crio"
	}
	return fmt.Errorf("%w: the socket %s exists but %s (%v): is %s running? look with `systemctl status %s` (or `rc-service %s status`), or pass another socket with --container-runtime-endpoint",
		ErrRuntimeDead, path, why, err, service, service, service)
}

// versionWarnings: what in the runtime's version works here but should be
// upgraded.
func versionWarnings(rt *Runtime) []string {
	var out []string
	if rt.Name == "containerd" {
		v, err := version.ParseGeneric(rt.Version)
		switch {
		case err != nil:
			out = append(out, fmt.Sprintf("containerd version %q cannot be read: Kubernetes 1.37 asks for containerd 2.x", rt.Version))
		case v.LessThan(version.MajorMinor(1, 7)):
			out = append(out, fmt.Sprintf("containerd %s is older than 1.7: Kubernetes 1.37 asks for containerd 2.x; it runs here, but upgrade when you can", rt.Version))
		}
	}
	if rt.APIVersion != "" && rt.APIVersion != "v1" {
		out = append(out, fmt.Sprintf("the runtime reports CRI API version %q where this kubelet expects \"v1\"", rt.APIVersion))
	}
	return out
}

// SearchPaths are the sockets Detect looks for when given no endpoint, in
// its order (edgeplane crictl and ctr look there too).
func SearchPaths() []string { return searchPaths() }
