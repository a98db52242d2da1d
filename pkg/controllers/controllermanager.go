package controllers

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgeplane/edgeplane/internal/kubeclient"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/component-base/configz"
	"k8s.io/klog/v2"
	cmapp "k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

// readyPollInterval is how often Ready looks for the default ServiceAccount
// (a ~1 ms Get on loopback; at 100 ms it would cost 50 ms of every start on
// average).
const readyPollInterval = 25 * time.Millisecond

// eventLogLevel is the verbosity at which the controller-manager logs the
// events it records (upstream: 0, one line per Pod created or deleted).
const eventLogLevel klog.Level = 3

// ControllerManager runs kube-controller-manager in-process. It implements
// the bootstrap component contract and healthz.HealthChecker.
type ControllerManager struct {
	opts Options
	*runner
}

// NewControllerManager validates opts; nothing runs before Start.
func NewControllerManager(opts Options) (*ControllerManager, error) {
	if errs := opts.Validate(); len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	m := &ControllerManager{opts: opts}
	m.runner = newRunner("controller-manager", controllerManagerLease, opts.PKI.ControllerManagerKubeconfig, opts.LeaderElect, m.term)
	return m, nil
}

// Name implements the component contract.
func (m *ControllerManager) Name() string { return "controller-manager" }

// Start launches the controller-manager and returns at once. Call it once the
// API server is ready.
func (m *ControllerManager) Start(ctx context.Context) error { return m.start(ctx) }

// Ready returns nil once the controllers run (their informers are listing and
// the default ServiceAccount of namespace default exists), or, with leader
// election, once another server is seen holding the lease. It returns the
// error if the controller-manager could not be started at all.
func (m *ControllerManager) Ready(ctx context.Context) error { return m.ready(ctx) }

// Stop stops the controllers, waiting for them within ctx. Idempotent.
func (m *ControllerManager) Stop(ctx context.Context) error { return m.stop(ctx) }

// Check is a health check (healthz.HealthChecker): nil while the controllers
// run or this server stands by for another lease holder.
func (m *ControllerManager) Check(_ *http.Request) error { return m.check() }

// term builds a fresh upstream configuration and runs the controllers until
// ctx ends. Every term rebuilds everything: upstream's Run shuts its event
// broadcaster and informers down when it returns.
func (m *ControllerManager) term(ctx context.Context, ready func()) error {
	admin, err := kubeclient.New(m.opts.PKI.AdminKubeconfig, "controllers-rbac", kubeclient.Burst)
	if err != nil {
		return err
	}
	if err := EnsureNodeBootstrapRBAC(ctx, admin); err != nil {
		return err
	}

	s, err := controllerManagerOptions(&m.opts)
	if err != nil {
		return err
	}
	c, err := s.Config(ctx, cmapp.KnownControllers(), cmapp.ControllersDisabledByDefault(), cmapp.ControllerAliases())
	if err != nil {
		return fmt.Errorf("controller-manager: config: %w", err)
	}
	// Before the Wrap below: the credentials client is not an informer client.
	if c.Client, err = credentialsClient(c.Kubeconfig); err != nil {
		return err
	}
	informing := make(chan struct{})
	c.Kubeconfig.Wrap(signalOnFirstInformerRequest(informing))
	c.EventBroadcaster = quietEvents{c.EventBroadcaster}
	// Run registers its configz section and fails if one is left from an
	// earlier term.
	configz.Delete(cmapp.ConfigzName)

	termCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() {
		if waitControllers(termCtx, c.Client, informing) == nil {
			ready()
		}
	})
	// Their failure ends the term, as a controller's failing to start ends
	// upstream's Run. So does the taint-eviction controller's, run outside
	// upstream's too (autonomy.go).
	var configMapsErr error
	wg.Go(func() {
		if configMapsErr = runConfigMapControllers(termCtx, c.Kubeconfig, c.Client.CoreV1(), s.SAController.RootCAFile, m.opts.Informers); configMapsErr != nil {
			cancel()
		}
	})
	var evictionErr error
	wg.Go(func() {
		if evictionErr = runTaintEviction(termCtx, c.Kubeconfig, c.Client.CoreV1()); evictionErr != nil {
			cancel()
		}
	})
	err = cmapp.Run(termCtx, c.Complete())
	cancel()
	wg.Wait()
	if err != nil {
		releaseLeakedInformerName(klog.FromContext(ctx))
	}
	if err == nil {
		err = errors.Join(configMapsErr, evictionErr)
	}
	return err
}

// waitControllers returns once the shared informers have started (which
// upstream does right after building every controller) and the service
// account controller has made the default ServiceAccount (its informers have
// synced and its own token works).
func waitControllers(ctx context.Context, client kubernetes.Interface, informing <-chan struct{}) error {
	select {
	case <-informing:
	case <-ctx.Done():
		return ctx.Err()
	}
	// A Get every readyPollInterval. A watch (list, then watch) is no faster
	// on a first start and 50-80 ms slower on a restart, where the account
	// exists and the first Get finds it.
	return wait.PollUntilContextCancel(ctx, readyPollInterval, true, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
}

// sharedInformersAgent ends the User-Agent of the controller-manager's shared
// informer clients (upstream's rootClientBuilder.Client("shared-informers")).
const sharedInformersAgent = "/shared-informers"

// signalOnFirstInformerRequest closes ch on the first request from the shared
// informers other than the API server health wait that precedes building the
// controllers: upstream starts the informers once every controller is built.
func signalOnFirstInformerRequest(ch chan struct{}) func(http.RoundTripper) http.RoundTripper {
	var once sync.Once
	var seen atomic.Bool
	return func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			if !seen.Load() && strings.HasSuffix(req.Header.Get("User-Agent"), sharedInformersAgent) &&
				!strings.HasPrefix(req.URL.Path, "/healthz") {
				seen.Store(true)
				once.Do(func() { close(ch) })
			}
			return rt.RoundTrip(req)
		})
	}
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// quietEvents logs recorded events at eventLogLevel instead of the level the
// controller-manager asks for.
type quietEvents struct{ record.EventBroadcaster }

func (q quietEvents) StartStructuredLogging(klog.Level) watch.Interface {
	return q.EventBroadcaster.StartStructuredLogging(eventLogLevel)
}
