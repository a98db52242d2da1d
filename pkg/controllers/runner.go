package controllers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/edgeplane/edgeplane/internal/kubeclient"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// termFunc builds the upstream component afresh and runs it until ctx ends.
// It calls ready once the component does its job; it must return only after
// the component's goroutines have ended, or as soon as ctx has.
type termFunc func(ctx context.Context, ready func()) error

// Upstream leader-election timings (the component flags' defaults).
var (
	leaseDuration = 15 * time.Second
	renewDeadline = 10 * time.Second
	retryPeriod   = 2 * time.Second
)

// Restart back-off after a term fails once the component has been ready.
var (
	minRestartDelay = time.Second
	maxRestartDelay = 30 * time.Second
)

var (
	errNotStarted = errors.New("not started")
	errStarting   = errors.New("starting")
	errStopped    = errors.New("stopped")
)

// runner is the lifecycle shared by both components. A term is one run of the
// upstream component. Without leader election there is one term from Start to
// Stop (restarted with back-off if it fails after having been ready); with it,
// terms run only while this process holds the lease.
//
// Upstream's own leader election is not used: when it ends, the scheduler
// calls os.Exit and the controller-manager klog.FlushAndExit (unless an alpha
// gate is on), taking the whole edgeplane process with them.
type runner struct {
	name        string // component name, for logs and errors
	lease       string // kube-system Lease name
	kubeconfig  string // identity used for the lease
	leaderElect bool
	term        termFunc
	// newLock builds the lease lock; tests replace it.
	newLock func(identity string) (resourcelock.Interface, error)

	mu       sync.Mutex
	started  bool
	stopped  bool
	cancel   context.CancelFunc
	done     chan struct{} // closed when the run loop has returned
	err      error         // why the loop gave up; read after done
	health   error         // nil when working (or a healthy standby)
	readyCh  chan struct{}
	readyOne sync.Once
}

func newRunner(name, lease, kubeconfig string, leaderElect bool, term termFunc) *runner {
	r := &runner{
		name: name, lease: lease, kubeconfig: kubeconfig, leaderElect: leaderElect, term: term,
		done: make(chan struct{}), readyCh: make(chan struct{}), health: errNotStarted,
	}
	r.newLock = r.kubeconfigLock
	return r
}

// kubeconfigLock is a kube-system Lease lock using the component's identity,
// with upstream's request timeout of half the renew deadline.
func (r *runner) kubeconfigLock(identity string) (resourcelock.Interface, error) {
	cfg, err := kubeclient.Config(r.kubeconfig, r.name+"-leader-election", kubeclient.Steady)
	if err != nil {
		return nil, err
	}
	return resourcelock.NewFromKubeconfig(resourcelock.LeasesResourceLock, "kube-system", r.lease,
		resourcelock.ResourceLockConfig{Identity: identity}, cfg, renewDeadline)
}

// start launches the run loop and returns at once. The loop outlives ctx,
// which bounds start-up only; its logger is kept.
func (r *runner) start(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.stopped:
		return fmt.Errorf("%s: already stopped", r.name)
	case r.started:
		return fmt.Errorf("%s: already started", r.name)
	}
	logger := klog.FromContext(ctx).WithName(r.name)
	runCtx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	r.started, r.cancel, r.health = true, cancel, errStarting
	go func() {
		defer close(r.done)
		var err error
		if r.leaderElect {
			err = r.campaign(runCtx)
		} else {
			err = r.runTerms(runCtx)
		}
		r.mu.Lock()
		r.err = err
		if err != nil {
			r.health = err
		} else {
			r.health = errStopped
		}
		r.mu.Unlock()
	}()
	return nil
}

// ready returns nil once the component works, or, with leader election, once
// another holder of the lease has been seen (this process is then a standby).
func (r *runner) ready(ctx context.Context) error {
	r.mu.Lock()
	started := r.started
	r.mu.Unlock()
	if !started {
		return fmt.Errorf("%s: %w", r.name, errNotStarted)
	}
	select {
	case <-r.readyCh:
		return nil
	default:
	}
	select {
	case <-r.readyCh:
		return nil
	case <-r.done:
		select {
		case <-r.readyCh:
			return nil
		default:
		}
		if r.err != nil {
			return fmt.Errorf("%s: %w", r.name, r.err)
		}
		return fmt.Errorf("%s: stopped before it was ready", r.name)
	case <-ctx.Done():
		return fmt.Errorf("%s: not ready: %w", r.name, ctx.Err())
	}
}

// stop ends the current term and the election (releasing a held lease after
// the term has ended), bounded by ctx. It is idempotent and valid in any state.
func (r *runner) stop(ctx context.Context) error {
	r.mu.Lock()
	started, cancel := r.started, r.cancel
	r.stopped = true
	if !started {
		r.health = errStopped
	}
	r.mu.Unlock()
	if !started {
		return nil
	}
	cancel()
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s: stop: %w", r.name, ctx.Err())
	}
}

// check is a health check: nil while the component works or stands by.
func (r *runner) check() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.health != nil {
		return fmt.Errorf("%s: %w", r.name, r.health)
	}
	return nil
}

func (r *runner) setHealth(err error) {
	r.mu.Lock()
	r.health = err
	r.mu.Unlock()
}

// markReady is handed to terms: the component works.
func (r *runner) markReady() {
	r.setHealth(nil)
	r.readyOne.Do(func() { close(r.readyCh) })
}

func (r *runner) isReady() bool {
	select {
	case <-r.readyCh:
		return true
	default:
		return false
	}
}

// runTerms runs terms until ctx ends. A term that fails before the component
// was ever ready ends the loop with its error (a configuration problem, which
// Ready reports); later failures are logged and the term restarted.
func (r *runner) runTerms(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	delay := minRestartDelay
	for {
		begin := time.Now()
		if r.isReady() {
			r.setHealth(errStarting)
		}
		err := r.term(ctx, r.markReady)
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			err = errors.New("returned unexpectedly")
		}
		if !r.isReady() {
			return err
		}
		if time.Since(begin) > 2*maxRestartDelay {
			delay = minRestartDelay
		}
		r.setHealth(fmt.Errorf("restarting after: %w", err))
		logger.Error(err, "Component stopped; restarting", "delay", delay)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delay):
		}
		delay = min(2*delay, maxRestartDelay)
	}
}

// campaign runs terms while holding the lease, and campaigns again when the
// lease is lost, until ctx ends. The election has its own context so that on
// shutdown the term ends first and the lease is released only afterwards.
func (r *runner) campaign(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	hostname, err := os.Hostname()
	if err != nil {
		return fmt.Errorf("leader election identity: %w", err)
	}
	identity := hostname + "_" + string(uuid.NewUUID())
	lock, err := r.newLock(identity)
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	for {
		leading := make(chan context.Context, 1)
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:            lock,
			LeaseDuration:   leaseDuration,
			RenewDeadline:   renewDeadline,
			RetryPeriod:     retryPeriod,
			ReleaseOnCancel: true,
			Name:            r.lease,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(lctx context.Context) { leading <- lctx },
				OnStoppedLeading: func() {},
				OnNewLeader: func(holder string) {
					if holder != identity && holder != "" {
						logger.Info("Another server holds the lease; standing by", "lease", r.lease, "holder", holder)
						r.markReady()
					}
				},
			},
		})
		if err != nil {
			return fmt.Errorf("leader election: %w", err)
		}
		leCtx, leCancel := context.WithCancel(context.WithoutCancel(ctx))
		leDone := make(chan struct{})
		go func() {
			defer close(leDone)
			le.Run(leCtx)
		}()

		var termErr error
		led := false
		select {
		case lctx := <-leading:
			led = true
			logger.Info("Acquired the lease", "lease", r.lease, "identity", identity)
			termCtx, termCancel := context.WithCancel(ctx)
			stopAfter := context.AfterFunc(lctx, termCancel)
			termErr = r.runTerms(termCtx)
			stopAfter()
			termCancel()
		case <-ctx.Done():
		case <-leDone:
		}
		// Release the lease (if held) only now that no term runs.
		leCancel()
		<-leDone
		if termErr != nil || ctx.Err() != nil {
			return termErr
		}
		if led {
			r.setHealth(nil) // a standby again
			logger.Info("Lost the lease; campaigning again", "lease", r.lease)
			continue
		}
		select { // the elector gave up on its own: do not spin
		case <-ctx.Done():
			return nil
		case <-time.After(retryPeriod):
		}
	}
}
