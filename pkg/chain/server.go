package chain

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	genericapiserver "k8s.io/apiserver/pkg/server"
	clientgoinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

// Server is the running chain. Its lifecycle follows the bootstrap's
// component contract:
//
//	New -> Start -> Ready -> Stop
//	        |                 ^
//	        +-----------------+  (Stop is valid in any state and idempotent)
//
// Start builds the chain (seconds of CPU) without holding the lock: a Stop
// or a cancelled start-up context during the build makes Start return at
// once; the abandoned build then releases the listener when it returns.
type Server struct {
	cfg Config

	mu       sync.Mutex
	state    serverState
	cancel   context.CancelFunc // ends the chain's run context and a build in progress; set by Start
	done     chan struct{}      // closed when the chain's Run returns, or when a start failed or was abandoned
	runErr   error              // what Run returned; read after done is closed
	loopback *rest.Config
	// informers is the kube-apiserver's own shared informer factory, for the
	// server's controllers (informers.go); set once running.
	informers *sharedInformers
	timeline  *timeline

	listenerOnce sync.Once
	hooksOnce    sync.Once
	hooksDone    chan struct{} // closed once Ready saw /readyz 200: every post-start hook has finished
}

// hookWait bounds how long Stop waits for the post-start hooks of a chain
// that is not ready yet: upstream ends the process (klog.Fatal) when a hook
// fails, and a hook whose context is cancelled fails.
const hookWait = 10 * time.Second

type serverState int

const (
	stateNew      serverState = iota
	stateStarting             // building
	stateRunning              // Run called
	stateStopped              // stopped before it ran, or its start failed or was abandoned
)

// New checks the configuration. The heavy work (building storage, admission,
// authentication) happens in Start, once the datastore is up.
func New(cfg Config) (*Server, error) {
	if cfg.InformerResync == 0 {
		cfg.InformerResync = defaultInformerResync
	}
	if cfg.ShutdownWatchGrace == 0 {
		cfg.ShutdownWatchGrace = defaultWatchGrace
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Server{cfg: cfg, done: make(chan struct{}), hooksDone: make(chan struct{})}, nil
}

// Name implements the bootstrap component contract.
func (s *Server) Name() string { return "apiserver" }

// Start builds the three servers and starts serving. It returns once the
// listener is live; Ready reports when every post-start hook has finished.
// When ctx is cancelled or Stop is called during the build, it returns at
// once with an error.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	if s.state != stateNew {
		s.mu.Unlock()
		return errors.New("chain: already started or stopped")
	}
	logger := klog.FromContext(ctx).WithName("apiserver")
	// The run context outlives the start-up context: it ends only on Stop,
	// or during the build when start-up is cancelled.
	runCtx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	s.state, s.cancel = stateStarting, cancel
	s.mu.Unlock()

	stopBuild := context.AfterFunc(ctx, cancel)
	type result struct {
		prepared  runnable
		loopback  *rest.Config
		informers clientgoinformers.SharedInformerFactory
		err       error
	}
	built := make(chan result, 1)
	go func() {
		prepared, loopback, informers, err := build(runCtx, &s.cfg)
		built <- result{prepared, loopback, informers, err}
	}()
	var r result
	select {
	case r = <-built:
	case <-runCtx.Done():
		r.err = errStartCancelled
	}
	stopBuild()

	s.mu.Lock()
	defer s.mu.Unlock()
	if r.err == nil && runCtx.Err() != nil { // built, but stopped meanwhile
		r.err = errStartCancelled
	}
	if r.err != nil {
		cancel()
		s.state, s.runErr = stateStopped, r.err
		if errors.Is(r.err, errStartCancelled) {
			// Do not wait for the build: it ends on its own, and is not run.
			go func() {
				<-built
				s.closeListener()
				close(s.done)
			}()
			why := errors.New("stopped")
			if ctx.Err() != nil {
				why = context.Cause(ctx)
			}
			return fmt.Errorf("%w: %w", r.err, why)
		}
		// The listener was handed to us: release it so nothing leaks on a failed start.
		s.closeListener()
		close(s.done)
		return r.err
	}
	s.state, s.loopback = stateRunning, r.loopback
	s.informers = &sharedInformers{SharedInformerFactory: r.informers, ctx: runCtx}
	s.timeline = newTimeline()
	go func() {
		defer close(s.done)
		s.runErr = r.prepared.Run(runCtx)
	}()
	logger.V(1).Info("Serving", "address", s.cfg.Listener.Addr().String())
	return nil
}

var errStartCancelled = errors.New("chain: start-up cancelled")

func (s *Server) closeListener() {
	s.listenerOnce.Do(func() { _ = s.cfg.Listener.Close() })
}

// build turns our Config into a prepared upstream aggregator chain.
func build(ctx context.Context, c *Config) (runnable, *rest.Config, clientgoinformers.SharedInformerFactory, error) {
	steps := newBuildSteps()
	authnFile, err := writeAuthenticationConfig(filepath.Clean(c.StateDir))
	if err != nil {
		return nil, nil, nil, err
	}
	opts, err := buildOptions(c, authnFile)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := registerComponentGlobals(opts, c.Tuning.featureGates()); err != nil {
		return nil, nil, nil, err
	}
	completed, err := opts.Complete(ctx)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("chain: complete options: %w", err)
	}
	if errs := completed.Validate(); len(errs) != 0 {
		return nil, nil, nil, fmt.Errorf("chain: invalid options: %w", utilerrors.NewAggregate(errs))
	}
	steps.done("options")
	config, err := newConfig(completed, c.InformerResync, c.CompactionInterval, c.Storage.InProcess, c.Cluster)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("chain: build config: %w", err)
	}
	if err := checkAllowPrivileged(c.AllowPrivileged); err != nil {
		return nil, nil, nil, err
	}
	steps.done("config")
	// Taken before tune turns the upstream hooks they replace off.
	hooks := bootstrapHooks(config.KubeAPIs.ControlPlane.Generic.DisabledPostStartHooks)
	tune(config, c)
	completedConfig, err := config.Complete()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("chain: complete config: %w", err)
	}
	steps.done("complete")
	aggregator, err := app.CreateServerChain(completedConfig)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("chain: create server chain: %w", err)
	}
	steps.done("servers")
	// Before PrepareRun, where the aggregator reads the delegates' OpenAPI.
	kubeAPIServer, ok := aggregator.GenericAPIServer.NextDelegate().(*genericapiserver.GenericAPIServer)
	if !ok {
		return nil, nil, nil, fmt.Errorf("chain: the aggregator's delegate is a %T, not the kube-apiserver", aggregator.GenericAPIServer.NextDelegate())
	}
	// Before the OpenAPI, which lists the kube-apiserver's routes.
	if err := installAPIs(kubeAPIServer, config.KubeAPIs.ControlPlane.Extra.VersionedInformers, c.APIs); err != nil {
		return nil, nil, nil, err
	}
	generic := config.KubeAPIs.ControlPlane.Generic
	installOpenAPI(kubeAPIServer, generic.OpenAPIConfig, generic.OpenAPIV3Config, filepath.Clean(c.StateDir))
	steps.done("openapi")
	// The aggregator is outermost: its /readyz speaks for the whole chain.
	if err := aggregator.GenericAPIServer.AddReadyzChecks(c.ReadyzChecks...); err != nil {
		return nil, nil, nil, fmt.Errorf("chain: readyz checks: %w", err)
	}
	for name, hook := range hooks {
		if err := aggregator.GenericAPIServer.AddPostStartHook(name, hook); err != nil {
			return nil, nil, nil, fmt.Errorf("chain: %w", err)
		}
	}
	prepared, err := aggregator.PrepareRun()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("chain: prepare: %w", err)
	}
	steps.done("prepare")
	steps.log(ctx)
	return prepared, rest.CopyConfig(aggregator.GenericAPIServer.LoopbackClientConfig), config.KubeAPIs.ControlPlane.Extra.VersionedInformers, nil
}

// runnable is the prepared aggregator.
type runnable interface {
	Run(ctx context.Context) error
}

// LoopbackConfig is a privileged client config for in-process use, valid after Start.
func (s *Server) LoopbackConfig() *rest.Config {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.loopback == nil {
		return nil
	}
	return rest.CopyConfig(s.loopback)
}

// Done is closed when the chain has stopped serving, for whatever reason.
func (s *Server) Done() <-chan struct{} { return s.done }

// Err is why the chain stopped; valid once Done is closed.
func (s *Server) Err() error {
	select {
	case <-s.done:
		return s.runErr
	default:
		return nil
	}
}

// Stop stops accepting connections, drains in-flight requests and watches,
// and waits for the chain to return, bounded by ctx. During Start's build it
// cancels the build and returns at once: Start then returns an error, and
// the listener is closed when the abandoned build returns.
func (s *Server) Stop(ctx context.Context) error {
	s.mu.Lock()
	state, cancel := s.state, s.cancel
	if state == stateNew {
		s.state = stateStopped
	}
	s.mu.Unlock()
	switch state {
	case stateNew:
		s.closeListener()
		return nil
	case stateStarting, stateStopped:
		if cancel != nil {
			cancel()
		}
		return nil
	}
	s.waitForHooks(ctx)
	cancel()
	select {
	case <-s.done:
		if s.runErr != nil && !errors.Is(s.runErr, context.Canceled) {
			return fmt.Errorf("chain: %w", s.runErr)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("chain: stop: %w", ctx.Err())
	}
}

// waitForHooks waits, up to hookWait and ctx, for the post-start hooks of a
// chain that has not been ready yet: cancelled, an upstream hook fails and
// takes the process down (exit 255) instead of a clean stop. A SIGTERM
// right after start-up waits ~1 s for them.
func (s *Server) waitForHooks(ctx context.Context) {
	select {
	case <-s.hooksDone:
		return
	default:
	}
	wctx, cancel := context.WithTimeout(ctx, hookWait)
	defer cancel()
	if err := s.Ready(wctx); err != nil {
		klog.FromContext(ctx).Info("Stopping the API server before its post-start hooks finished", "err", err.Error())
	}
}
