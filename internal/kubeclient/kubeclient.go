// Package kubeclient builds the API clients of edgeplane's own parts from
// kubeconfig files, and holds the one rule for which API errors are worth
// retrying and how.
//
// Every part names itself (the user agent is "edgeplane/<part>", so the API
// server's logs and audit say which part asked) and takes one of two rate
// limits: Steady for parts that run for the life of the process (their
// requests follow events: client-go's own 5 QPS / burst 10), Burst for
// parts whose requests come in runs at start-up or on a user's command
// (50 QPS / burst 100: client-go's 5 / 10 made a warm restart wait ~150 ms
// on client-side throttling against an API server in the same process).
package kubeclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
)

// Rate is a client's rate limit.
type Rate int

const (
	// Steady is client-go's default, 5 QPS with a burst of 10.
	Steady Rate = iota
	// Burst is 50 QPS with a burst of 100.
	Burst
)

// UserAgent is the user agent of the part named part.
func UserAgent(part string) string { return "edgeplane/" + part }

// Config is the client config of the kubeconfig file at path for the part
// named part, at rate. A missing or malformed file is an error that names
// it; client certificate files it names are read when a connection is made
// (client-go reloads them when they rotate).
func Config(path, part string, rate Rate) (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("%s: kubeconfig %s: %w", part, path, err)
	}
	cfg.UserAgent = UserAgent(part)
	if rate == Burst {
		cfg.QPS, cfg.Burst = 50, 100
	}
	return cfg, nil
}

// New is a clientset built from Config.
func New(path, part string, rate Rate) (kubernetes.Interface, error) {
	cfg, err := Config(path, part, rate)
	if err != nil {
		return nil, err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", part, err)
	}
	return client, nil
}

// Transient reports whether err may pass if the request is made again: the
// API server is starting, overloaded or briefly unreachable, or an update
// lost a race. A refusal (invalid, forbidden, unauthorized, not found) or an
// error that did not come from talking to the API is not transient.
func Transient(err error) bool {
	if err == nil {
		return false
	}
	switch {
	case apierrors.IsServerTimeout(err), apierrors.IsTimeout(err), apierrors.IsTooManyRequests(err),
		apierrors.IsServiceUnavailable(err), apierrors.IsInternalError(err), apierrors.IsConflict(err):
		return true
	case apierrors.ReasonForError(err) != "" && apierrors.ReasonForError(err) != "Unknown":
		return false // any other answer of the API server
	}
	var netErr net.Error
	return errors.As(err, &netErr) || utilnet.IsConnectionRefused(err) || utilnet.IsConnectionReset(err) ||
		utilnet.IsProbableEOF(err) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// Retry runs f until it returns nil, a non-Transient error, or window
// passes (0: until ctx ends), backing off from 250 ms to 5 s. It returns
// f's last error, prefixed with what; a Transient error is logged at V(2)
// each time.
func Retry(ctx context.Context, what string, window time.Duration, f func(context.Context) error) error {
	logger := klog.FromContext(ctx)
	if window > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, window)
		defer cancel()
	}
	backoff := wait.Backoff{Duration: 250 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 1 << 30, Cap: 5 * time.Second}
	var last error
	for {
		last = f(ctx)
		if last == nil {
			return nil
		}
		if !Transient(last) {
			return fmt.Errorf("%s: %w", what, last)
		}
		logger.V(2).Info("Retrying", "what", what, "err", last.Error())
		t := time.NewTimer(backoff.Step())
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%s: %w (still failing when %v)", what, last, context.Cause(ctx))
		case <-t.C:
		}
	}
}
