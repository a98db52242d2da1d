package chain

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/cmd/kube-apiserver/app/options"
)

const (
	defaultWatchGrace = 2 * time.Second
	readyPollInterval = 25 * time.Millisecond // a ~1 ms GET on loopback; at 100 ms it cost ~50 ms of every start on average
	// slowCheck is the duration past which a readiness check is named in the start-up timeline.
	slowCheck = 300 * time.Millisecond
)

// componentGlobals is the outcome of applying the process-wide settings:
// they are applied once, and every later call gets the first call's error
// too (a failed Set must not read as success the second time).
var componentGlobals struct {
	once sync.Once
	err  error
}

// registerComponentGlobals applies the process-wide feature gates and
// effective version once, as the kube-apiserver command does before Run,
// and then gates, the profile's (Tuning.featureGates): the first chain of a
// process sets them, as the first chain's flags would. /metrics reports
// the gates as they are then.
func registerComponentGlobals(opts *options.ServerRunOptions, gates map[string]bool) error {
	componentGlobals.once.Do(func() {
		// In-process clients of the apiserver should not log its warnings.
		rest.SetDefaultWarningHandler(rest.NoWarnings{})
		if err := opts.GenericServerRunOptions.ComponentGlobalsRegistry.Set(); err != nil {
			componentGlobals.err = fmt.Errorf("chain: applying the feature gates and emulated version: %w", err)
			return
		}
		if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(gates); err != nil {
			componentGlobals.err = fmt.Errorf("chain: applying the profile's feature gates: %w", err)
			return
		}
		// As the kube-apiserver command does: /metrics reports each gate
		// (kubernetes_feature_enabled) and the component versions.
		utilfeature.DefaultMutableFeatureGate.AddMetrics()
		opts.GenericServerRunOptions.ComponentGlobalsRegistry.AddMetrics()
	})
	return componentGlobals.err
}

// timeline records when each /readyz check first reported ok.
type timeline struct {
	start time.Time
	okAt  map[string]time.Duration
}

func newTimeline() *timeline {
	return &timeline{start: time.Now(), okAt: map[string]time.Duration{}}
}

// observe parses a verbose /readyz body ("[+]name ok" / "[-]name failed: ...").
func (t *timeline) observe(body string, now time.Time) {
	for _, line := range strings.Split(body, "\n") {
		name, ok := strings.CutPrefix(line, "[+]")
		if !ok {
			continue
		}
		name = strings.TrimSuffix(strings.TrimSpace(name), " ok")
		if _, seen := t.okAt[name]; !seen {
			t.okAt[name] = now.Sub(t.start)
		}
	}
}

// Check is one readiness check and when it first turned ok after Start.
type Check struct {
	Name  string
	After time.Duration
}

// slow lists the checks that took longer than slowCheck, slowest last.
func (t *timeline) slow() []Check {
	var out []Check
	for name, d := range t.okAt {
		if d >= slowCheck {
			out = append(out, Check{Name: name, After: d})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].After < out[j].After })
	return out
}

// Ready polls /readyz (less Config.StartupChecks) until it answers 200, logging the readiness checks
// (post-start hooks among them) that were slow to turn ok.
func (s *Server) Ready(ctx context.Context) error {
	s.mu.Lock()
	loopback, tl := s.loopback, s.timeline
	s.mu.Unlock()
	if loopback == nil {
		return fmt.Errorf("chain: not started")
	}
	client, err := kubernetes.NewForConfig(loopback)
	if err != nil {
		return err
	}
	logger := klog.FromContext(ctx).WithName("apiserver")
	ticker := time.NewTicker(readyPollInterval)
	defer ticker.Stop()
	var last string
	for {
		var status int
		req := client.Discovery().RESTClient().Get().AbsPath("/readyz").Param("verbose", "true")
		for _, name := range s.cfg.StartupChecks {
			req = req.Param("exclude", name)
		}
		body, err := req.Do(ctx).StatusCode(&status).Raw()
		if len(body) > 0 {
			tl.observe(string(body), time.Now())
			last = string(body)
		}
		if err == nil && status == 200 {
			s.hooksOnce.Do(func() { close(s.hooksDone) })
			for _, c := range tl.slow() {
				logger.Info("Readiness check done", "check", c.Name, "after", c.After.Round(time.Millisecond))
			}
			return nil
		}
		select {
		case <-s.done:
			return fmt.Errorf("chain: stopped before ready: %v", s.runErr)
		case <-ctx.Done():
			return fmt.Errorf("chain: not ready: %w; last /readyz:\n%s", ctx.Err(), failing(last))
		case <-ticker.C:
		}
	}
}

// failing keeps only the failing lines of a verbose /readyz body.
func failing(body string) string {
	var out []string
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "[-]") {
			out = append(out, line)
		}
	}
	if len(out) == 0 {
		return body
	}
	return strings.Join(out, "\n")
}
