package kubelet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/klog/v2"
	kubeletapp "k8s.io/kubernetes/cmd/kubelet/app"
	kubeletoptions "k8s.io/kubernetes/cmd/kubelet/app/options"
)

// Kubelet is the upstream kubelet as an edgeplane component:
//
//	Start: build the kubelet's options and dependencies, then run it in
//	       the background on a context of its own.
//	Ready: the kubelet's healthz answers (it has started its sync loop).
//	Stop:  cancel that context; upstream's app.Run then returns.
//
// Upstream's kubelet is built to end with its process: stopping it returns
// app.Run, but some of its goroutines (cAdvisor, the volume manager) keep
// going until the process exits, and a kubelet cannot be started twice in
// one process (its metrics register once). Some of its failures after start
// end the process (os.Exit in upstream), as they would end the kubelet's.
type Kubelet struct {
	opts Options

	mu      sync.Mutex
	started bool
	cancel  context.CancelFunc
	done    chan struct{}
	err     error
	healthz string
}

// New validates o and returns a kubelet that is not started.
func New(o Options) (*Kubelet, error) {
	if errs := o.Validate(); len(errs) > 0 {
		return nil, utilerrors.NewAggregate(errs)
	}
	return &Kubelet{opts: o, done: make(chan struct{})}, nil
}

// Name implements the bootstrap component contract.
func (k *Kubelet) Name() string { return "kubelet" }

// Start builds the kubelet and runs it in the background.
func (k *Kubelet) Start(ctx context.Context) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.started {
		return errors.New("kubelet: already started")
	}
	logger := klog.FromContext(ctx).WithName("kubelet")
	s, err := k.opts.server(logger, CgroupV2())
	if err != nil {
		return err
	}
	if err := allowPrivileged(k.opts.AllowPrivileged); err != nil {
		return err
	}
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(s.KubeletConfiguration.FeatureGates); err != nil {
		return fmt.Errorf("kubelet: feature gates: %w", err)
	}
	if err := kubeletoptions.ValidateKubeletServer(s); err != nil {
		return fmt.Errorf("kubelet: invalid settings: %w", err)
	}
	if err := portsFree(s); err != nil {
		return err
	}
	deps, err := kubeletapp.UnsecuredDependencies(ctx, s, utilfeature.DefaultFeatureGate)
	if err != nil {
		return fmt.Errorf("kubelet: dependencies: %w", err)
	}
	runCtx, cancel := context.WithCancel(klog.NewContext(context.WithoutCancel(ctx), logger))
	k.cancel = cancel
	k.started = true
	k.healthz = "http://" + net.JoinHostPort(s.HealthzBindAddress, strconv.Itoa(int(s.HealthzPort))) + "/healthz"
	logger.Info("Starting the kubelet", "node", k.opts.NodeName, "runtime", k.opts.RuntimeEndpoint,
		"rootDir", k.opts.RootDir, "port", s.Port)
	go func() {
		err := kubeletapp.Run(runCtx, s, deps, utilfeature.DefaultFeatureGate)
		if err == nil && runCtx.Err() == nil {
			err = errors.New("kubelet: stopped on its own")
		}
		k.mu.Lock()
		k.err = err
		k.mu.Unlock()
		close(k.done)
	}()
	return nil
}

// portsFree checks the kubelet's ports before it starts: upstream's kubelet
// ends the process (os.Exit) when it cannot listen, which in a server would
// take the control plane down with it.
func portsFree(s *kubeletoptions.KubeletServer) error {
	for _, p := range []struct {
		what string
		addr string
		port int32
	}{
		{"API", s.Address, s.Port},
		{"healthz", s.HealthzBindAddress, s.HealthzPort},
	} {
		if p.port <= 0 {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort(p.addr, strconv.Itoa(int(p.port))))
		if err != nil {
			return fmt.Errorf("kubelet: its %s port %d is in use (another kubelet, k3s or k0s on this host?): stop it, or pass --kubelet-arg=port=... and --kubelet-arg=healthz-port=..., or --disable=kubelet on a server (%v)", p.what, p.port, err)
		}
		_ = l.Close()
	}
	return nil
}

// Ready waits until the kubelet's healthz answers 200, or the kubelet ends.
func (k *Kubelet) Ready(ctx context.Context) error {
	k.mu.Lock()
	url, started := k.healthz, k.started
	k.mu.Unlock()
	if !started {
		return errors.New("kubelet: not started")
	}
	client := &http.Client{Timeout: 2 * time.Second}
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		select {
		case <-k.done:
			return false, fmt.Errorf("kubelet ended before it was ready: %w", k.Err())
		default:
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return false, nil
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("kubelet not ready (healthz %s): %w", url, err)
	}
	return err
}

// Stop cancels the kubelet and waits for app.Run to return, bounded by ctx.
func (k *Kubelet) Stop(ctx context.Context) error {
	k.mu.Lock()
	cancel, started := k.cancel, k.started
	k.mu.Unlock()
	if !started {
		return nil
	}
	cancel()
	select {
	case <-k.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("kubelet did not stop: %w", ctx.Err())
	}
}

// Done is closed when the kubelet's app.Run has returned.
func (k *Kubelet) Done() <-chan struct{} { return k.done }

// Err is why the kubelet ended; nil while it runs or after Stop.
func (k *Kubelet) Err() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.cancel != nil && errors.Is(k.err, context.Canceled) {
		return nil
	}
	return k.err
}
