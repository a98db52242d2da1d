package controllers

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-base/configz"
	schedapp "k8s.io/kubernetes/cmd/kube-scheduler/app"
	schedconfig "k8s.io/kubernetes/cmd/kube-scheduler/app/config"
)

// schedulerConfigz is the configz section kube-scheduler's Run registers.
const schedulerConfigz = "componentconfig"

// schedulerResync is the resync period of upstream's scheduler informers
// (options.Config: none), which its handlers keep on the API server's.
const schedulerResync = 0

// Scheduler runs kube-scheduler in-process. It implements the bootstrap
// component contract and healthz.HealthChecker.
type Scheduler struct {
	opts Options
	*runner
}

// NewScheduler validates opts; nothing runs before Start.
func NewScheduler(opts Options) (*Scheduler, error) {
	if errs := opts.Validate(); len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	s := &Scheduler{opts: opts}
	s.runner = newRunner("scheduler", schedulerLease, opts.PKI.SchedulerKubeconfig, opts.LeaderElect, s.term)
	return s, nil
}

// Name implements the component contract.
func (s *Scheduler) Name() string { return "scheduler" }

// Start launches the scheduler and returns at once. Call it once the API
// server is ready.
func (s *Scheduler) Start(ctx context.Context) error { return s.start(ctx) }

// Ready returns nil once the scheduler's informers have synced and their
// event handlers have seen the initial lists, or, with leader election, once
// another server is seen holding the lease.
func (s *Scheduler) Ready(ctx context.Context) error { return s.ready(ctx) }

// Stop stops the scheduler, waiting for it within ctx. Idempotent.
func (s *Scheduler) Stop(ctx context.Context) error { return s.stop(ctx) }

// Check is a health check (healthz.HealthChecker).
func (s *Scheduler) Check(_ *http.Request) error { return s.check() }

// term sets the scheduler up afresh and runs it until ctx ends.
func (s *Scheduler) term(ctx context.Context, ready func()) error {
	opts, err := schedulerOptions(&s.opts)
	if err != nil {
		return err
	}
	// Named informers publish client-go informer metrics; the name is unique
	// per process until released.
	name, err := cache.NewInformerName("kube-scheduler")
	if err != nil {
		return fmt.Errorf("scheduler: %w", err)
	}
	defer name.Release()
	opts.InformerName = name

	termCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	// With the API server's informers, Pods stay the scheduler's own: it
	// lists and watches only non-terminal ones.
	var shared *termInformers
	adjust := func(cc *schedconfig.CompletedConfig) {
		if s.opts.Informers == nil {
			return
		}
		shared = newTermInformers(s.Name(), s.opts.Informers, cc.InformerFactory, schedulerResync,
			privateType{obj: &corev1.Pod{}, resource: corev1.SchemeGroupVersion.WithResource("pods")})
		cc.InformerFactory = shared
	}
	cc, sched, err := upstreamSchedulerSetup(termCtx, opts, adjust)
	if err != nil {
		if shared != nil {
			shared.Shutdown() // handlers a half-built scheduler registered
		}
		return fmt.Errorf("scheduler: setup: %w", err)
	}
	configz.Delete(schedulerConfigz)

	var wg sync.WaitGroup
	wg.Go(func() {
		if sched.WaitForHandlersSync(termCtx) == nil {
			ready()
		}
	})
	// Without leader election Run returns "finished without leader elect"
	// once ctx ends: that is a normal stop.
	err = schedapp.Run(termCtx, cc, sched)
	cancel()
	wg.Wait()
	// Run does not wait for the informers it started. With the API
	// server's informers this removes the scheduler's handlers from them.
	cc.InformerFactory.Shutdown()
	if cc.DynInformerFactory != nil {
		cc.DynInformerFactory.Shutdown()
	}
	if ctx.Err() != nil {
		return nil
	}
	return err
}
