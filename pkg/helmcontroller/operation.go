package helmcontroller

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-logr/logr"
	"helm.sh/helm/v4/pkg/action"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/kube"
	ri "helm.sh/helm/v4/pkg/release"
	"helm.sh/helm/v4/pkg/release/common"
	release "helm.sh/helm/v4/pkg/release/v1"
	"helm.sh/helm/v4/pkg/storage/driver"
	"k8s.io/klog/v2"
)

// maxHistory is how many records of a release are kept (helm's default).
const maxHistory = 10

// operation runs Helm's actions for one plan, in this process.
type operation struct {
	getter *restGetter
	plan   *plan
	hash   string
	logger klog.Logger
}

// config is Helm's action configuration for the release's namespace and
// storage driver; Helm logs at V(2) and up.
func (o *operation) config() (*action.Configuration, error) {
	cfg := action.NewConfiguration(action.ConfigurationSetLogger(logr.ToSlogHandler(o.logger.WithName("helm").V(2))))
	if err := cfg.Init(o.getter.inNamespace(o.plan.Namespace), o.plan.Namespace, o.plan.Driver); err != nil {
		return nil, err
	}
	return cfg, nil
}

func (o *operation) labels() map[string]string { return map[string]string{LabelConfigHash: o.hash} }

func (o *operation) install(ctx context.Context, ch *chart.Chart) (int, error) {
	cfg, err := o.config()
	if err != nil {
		return 0, err
	}
	in := action.NewInstall(cfg)
	in.ReleaseName = o.plan.Release
	in.Namespace = o.plan.Namespace
	in.CreateNamespace = o.plan.CreateNamespace
	in.TakeOwnership = o.plan.TakeOwnership
	in.ServerSideApply = o.plan.ServerSide != "false"
	in.ForceConflicts = o.plan.ForceConflicts
	in.Timeout = o.plan.Timeout
	in.WaitStrategy = kube.HookOnlyStrategy
	in.Labels = o.labels()
	rel, err := in.RunWithContext(ctx, ch, o.plan.Values)
	if err != nil {
		return 0, fmt.Errorf("install %s in %s: %w", o.plan.Release, o.plan.Namespace, err)
	}
	return revision(rel), nil
}

func (o *operation) upgrade(ctx context.Context, ch *chart.Chart) (int, error) {
	cfg, err := o.config()
	if err != nil {
		return 0, err
	}
	up := action.NewUpgrade(cfg)
	up.Namespace = o.plan.Namespace
	up.TakeOwnership = o.plan.TakeOwnership
	if o.plan.ServerSide != "" {
		up.ServerSideApply = o.plan.ServerSide
	}
	up.ForceConflicts = o.plan.ForceConflicts
	up.Timeout = o.plan.Timeout
	up.WaitStrategy = kube.HookOnlyStrategy
	up.ResetValues = true // exactly the HelmChart's values, also when it has none
	up.MaxHistory = maxHistory
	up.Labels = o.labels()
	rel, err := up.RunWithContext(ctx, o.plan.Release, ch, o.plan.Values)
	if err != nil {
		return 0, fmt.Errorf("upgrade %s in %s: %w", o.plan.Release, o.plan.Namespace, err)
	}
	return revision(rel), nil
}

// uninstall removes the release and its records; a release that is not
// there is no error.
func (o *operation) uninstall(_ context.Context) error {
	cfg, err := o.config()
	if err != nil {
		return err
	}
	un := action.NewUninstall(cfg)
	un.IgnoreNotFound = true
	un.Timeout = o.plan.Timeout
	un.WaitStrategy = kube.HookOnlyStrategy
	un.DeletionPropagation = "background"
	if _, err := un.Run(o.plan.Release); err != nil && !errors.Is(err, driver.ErrReleaseNotFound) {
		return fmt.Errorf("uninstall %s in %s: %w", o.plan.Release, o.plan.Namespace, err)
	}
	return nil
}

// markFailed marks a release left pending (the process stopped during an
// operation) as failed, so that it can be upgraded.
func (o *operation) markFailed(_ context.Context, version int) error {
	cfg, err := o.config()
	if err != nil {
		return err
	}
	r, err := cfg.Releases.Get(o.plan.Release, version)
	if err != nil {
		return fmt.Errorf("release %s revision %d: %w", o.plan.Release, version, err)
	}
	rel, ok := r.(*release.Release)
	if !ok {
		return fmt.Errorf("release %s revision %d: unexpected record %T", o.plan.Release, version, r)
	}
	o.logger.Info("Marking a release left pending as failed", "release", rel.Name, "revision", version, "status", rel.Info.Status)
	rel.SetStatus(common.StatusFailed, "interrupted: the server stopped during "+string(rel.Info.Status))
	return cfg.Releases.Update(rel)
}

func revision(r ri.Releaser) int {
	if rel, ok := r.(*release.Release); ok {
		return rel.Version
	}
	return 0
}
