package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// A LIST burst (-list-burst K): in the middle of the window, K clients list
// every pod in all namespaces, unpaged and one after another, for
// burstLength. It asks whether the nodes' heartbeats wait behind a burst of
// expensive reads (issue 28: "heartbeats never starve behind a burst of
// LISTs"): the Lease PUTs timed inside the burst are reported apart.
//
// The lists are sent as burstUser, an ordinary authenticated user bound to
// the view ClusterRole, by impersonation from the admin kubeconfig: API
// Priority and Fairness classifies a request after impersonation, so the
// lists fall in the global-default priority level as a dashboard's or an
// operator's script's would, where the admin's own (system:masters) would
// be exempt from it. The nodes' Lease renewals are in the system-nodes flow
// schema's priority level of their own.
const (
	burstLength  = 30 * time.Second
	burstUser    = "edgeplane-bench:lister"
	burstBinding = "edgeplane-bench-lister"
	// burstMaxLists bounds each client's lists whatever the server's speed.
	burstMaxLists = 2000
)

// burstResult is what one burst did.
type burstResult struct {
	from, to time.Time
	lists    int
	failed   int
	latency  []time.Duration
}

// ensureBurstUser binds burstUser to the view ClusterRole.
func ensureBurstUser(ctx context.Context, cs kubernetes.Interface) error {
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: burstBinding},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: burstUser}},
	}
	_, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("binding %s to view: %w", burstUser, err)
	}
	return nil
}

// runListBurst runs clients listers for length (each at most burstMaxLists
// lists) as burstUser.
func runListBurst(ctx context.Context, admin *rest.Config, clients int, length time.Duration) (burstResult, error) {
	cfg := rest.CopyConfig(admin)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: burstUser, Groups: []string{"system:authenticated"}}
	// The burst is the server's load, not client-go's rate limiter's.
	cfg.QPS, cfg.Burst = -1, 0
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return burstResult{}, err
	}
	var (
		mu  sync.Mutex
		res = burstResult{from: time.Now()}
		wg  sync.WaitGroup
	)
	bctx, cancel := context.WithTimeout(ctx, length)
	defer cancel()
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range burstMaxLists {
				if bctx.Err() != nil {
					return
				}
				start := time.Now()
				_, err := cs.CoreV1().Pods("").List(bctx, metav1.ListOptions{})
				d := time.Since(start)
				mu.Lock()
				switch {
				case err == nil:
					res.lists++
					res.latency = append(res.latency, d)
				case bctx.Err() == nil:
					res.failed++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	res.to = time.Now()
	return res, ctx.Err()
}

// startListBurst runs a burst of clients listers in the middle of a window
// of duration that begins now; the result arrives on the channel.
func startListBurst(ctx context.Context, admin *rest.Config, clients int, duration time.Duration) <-chan burstResult {
	out := make(chan burstResult, 1)
	length := min(burstLength, duration)
	go func() {
		select {
		case <-ctx.Done():
			out <- burstResult{}
			return
		case <-time.After((duration - length) / 2):
		}
		r, _ := runListBurst(ctx, admin, clients, length)
		out <- r
	}()
	return out
}
