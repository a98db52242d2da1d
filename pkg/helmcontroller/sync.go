package helmcontroller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// Event reasons.
const (
	reasonInstalled       = "Installed"
	reasonUpgraded        = "Upgraded"
	reasonUninstalled     = "Uninstalled"
	reasonInstallFailed   = "InstallFailed"
	reasonUpgradeFailed   = "UpgradeFailed"
	reasonUninstallFailed = "UninstallFailed"
	reasonChartFailed     = "ChartLoadFailed"
	reasonValuesFailed    = "ValuesFailed"
	reasonAborted         = "FailurePolicyAbort"
	reasonUnsupported     = "UnsupportedVersion"
	reasonNotUsed         = "FieldNotUsed"
)

// manages reports whether hc is this controller's: it names a chart, and no
// annotation gives it to another controller (k3s's rules).
func manages(hc *HelmChart) bool {
	if _, ok := hc.Annotations[AnnotationUnmanaged]; ok {
		return false
	}
	if by, ok := hc.Annotations[AnnotationManagedBy]; ok && by != ManagedBy {
		return false
	}
	return true
}

// sync brings the release of the HelmChart key where the object says.
func (c *Controller) sync(ctx context.Context, key string) error {
	u, hc, err := c.chart(key)
	if hc == nil || !manages(hc) {
		return err
	}
	logger := klog.FromContext(ctx).WithValues("helmchart", key)
	ctx = klog.NewContext(ctx, logger)
	if hc.DeletionTimestamp != nil {
		return c.remove(ctx, u, hc)
	}
	if hc.Spec.Chart == "" && hc.Spec.ChartContent == "" {
		return nil // as k3s: nothing to install
	}
	if v := hc.Spec.HelmVersion; v != "" && v != "v3" {
		return c.fail(ctx, u, hc, reasonUnsupported, permanent("spec.helmVersion %q is not supported: only v3 (or empty)", v))
	}
	if err := c.addFinalizer(ctx, u); err != nil {
		return err
	}
	c.reportUnused(u, hc)
	conf, err := c.config(hc)
	if err != nil {
		return c.fail(ctx, u, hc, reasonValuesFailed, err)
	}
	p, err := makePlan(ctx, c.client, hc, conf)
	if err != nil {
		return c.fail(ctx, u, hc, reasonValuesFailed, err)
	}
	hash := p.hash()
	last, err := c.lastRelease(ctx, p)
	if err != nil {
		return err
	}
	if last.status == "deployed" && last.hash == hash {
		return c.succeeded(ctx, u, hc, p, "", last.revision)
	}
	failed := last.status == "failed" || strings.HasPrefix(last.status, "pending-")
	if failed && p.FailurePolicy == FailurePolicyAbort {
		return c.fail(ctx, u, hc, reasonAborted, permanent(
			"release %s in %s is %s and spec.failurePolicy is abort: fix it with helm (rollback or uninstall), or set failurePolicy reinstall or retry",
			p.Release, p.Namespace, last.status))
	}
	ch, err := loadChart(ctx, c.client, hc)
	if err != nil {
		return c.fail(ctx, u, hc, reasonChartFailed, fmt.Errorf("chart from %s: %w", chartSource(&hc.Spec), err))
	}
	op := &operation{getter: c.getter, plan: p, hash: hash, logger: logger}
	var reason string
	var revision int
	switch {
	case last.revision == 0 || last.status == "uninstalled" || last.status == "uninstalling":
		reason = reasonInstalled
		revision, err = op.install(ctx, ch)
	case failed && (p.FailurePolicy == FailurePolicyReinstall || last.revision == 1):
		reason = reasonInstalled
		logger.Info("Reinstalling a release that is not deployed", "release", p.Release, "namespace", p.Namespace, "status", last.status)
		if err = op.uninstall(ctx); err == nil {
			revision, err = op.install(ctx, ch)
		}
	default:
		reason = reasonUpgraded
		if strings.HasPrefix(last.status, "pending-") {
			err = op.markFailed(ctx, last.revision)
		}
		if err == nil {
			revision, err = op.upgrade(ctx, ch)
		}
	}
	if err != nil {
		failReason := reasonInstallFailed
		if reason == reasonUpgraded {
			failReason = reasonUpgradeFailed
		}
		return c.fail(ctx, u, hc, failReason, err)
	}
	logger.Info(reason, "release", p.Release, "namespace", p.Namespace, "revision", revision)
	return c.succeeded(ctx, u, hc, p, reason, revision)
}

// remove uninstalls the release of a HelmChart being deleted, then lets the
// object go.
func (c *Controller) remove(ctx context.Context, u *unstructured.Unstructured, hc *HelmChart) error {
	if !slices.Contains(hc.Finalizers, Finalizer) {
		return nil
	}
	p := &plan{Release: hc.Name, Namespace: hc.Namespace, Driver: hc.Spec.Driver, Timeout: defaultTimeout}
	if hc.Spec.TargetNamespace != "" {
		p.Namespace = hc.Spec.TargetNamespace
	}
	if p.Driver == "" {
		p.Driver = "secret"
	}
	if hc.Spec.Timeout != nil && hc.Spec.Timeout.Duration > 0 {
		p.Timeout = hc.Spec.Timeout.Duration
	}
	op := &operation{getter: c.getter, plan: p, logger: klog.FromContext(ctx)}
	if err := op.uninstall(ctx); err != nil {
		return c.fail(ctx, u, hc, reasonUninstallFailed, err)
	}
	c.recorder.Eventf(u, corev1.EventTypeNormal, reasonUninstalled, "Uninstalled release %s in %s", p.Release, p.Namespace)
	klog.FromContext(ctx).Info("Uninstalled", "release", p.Release, "namespace", p.Namespace)
	c.forget(hc.UID)
	return c.patchFinalizers(ctx, u, slices.DeleteFunc(slices.Clone(hc.Finalizers), func(f string) bool { return f == Finalizer }))
}

func (c *Controller) addFinalizer(ctx context.Context, u *unstructured.Unstructured) error {
	finalizers := u.GetFinalizers()
	if slices.Contains(finalizers, Finalizer) {
		return nil
	}
	return c.patchFinalizers(ctx, u, append(slices.Clone(finalizers), Finalizer))
}

// patchFinalizers sets the object's finalizers, if it is still the version
// read (a conflict is retried with the newer one).
func (c *Controller) patchFinalizers(ctx context.Context, u *unstructured.Unstructured, finalizers []string) error {
	if finalizers == nil {
		finalizers = []string{}
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"finalizers": finalizers, "resourceVersion": u.GetResourceVersion()}})
	if err != nil {
		return err
	}
	_, err = c.dyn.Resource(HelmChartResource).Namespace(u.GetNamespace()).Patch(ctx, u.GetName(), types.MergePatchType, patch, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// succeeded records a deployed release: an event when an operation ran
// (reason not empty), and the conditions.
func (c *Controller) succeeded(ctx context.Context, u *unstructured.Unstructured, hc *HelmChart, p *plan, reason string, revision int) error {
	msg := fmt.Sprintf("release %s in %s, revision %d", p.Release, p.Namespace, revision)
	if reason != "" {
		c.recorder.Eventf(u, corev1.EventTypeNormal, reason, "%s %s from %s", reason, msg, chartSource(&hc.Spec))
		c.setWarning(hc.UID, "")
	}
	deployedReason := reason
	if deployedReason == "" {
		deployedReason = "Deployed"
		if cond := condition(hc.Status.Conditions, ConditionDeployed); cond != nil && cond.Status == corev1.ConditionTrue && cond.Message == msg {
			deployedReason = cond.Reason
		}
	}
	return c.setConditions(ctx, u, hc,
		Condition{Type: ConditionFailed, Status: corev1.ConditionFalse},
		Condition{Type: ConditionDeployed, Status: corev1.ConditionTrue, Reason: deployedReason, Message: msg})
}

// fail records err: a Warning event (once for the same message) and the
// conditions. It returns err, so that a transient one is retried.
func (c *Controller) fail(ctx context.Context, u *unstructured.Unstructured, hc *HelmChart, reason string, err error) error {
	msg := err.Error()
	if c.setWarning(hc.UID, reason+msg) {
		c.recorder.Event(u, corev1.EventTypeWarning, reason, msg)
	}
	klog.FromContext(ctx).Info("HelmChart failed", "reason", reason, "err", msg)
	deployed := Condition{Type: ConditionDeployed, Status: corev1.ConditionFalse, Reason: reason}
	if serr := c.setConditions(ctx, u, hc, Condition{Type: ConditionFailed, Status: corev1.ConditionTrue, Reason: reason, Message: msg}, deployed); serr != nil {
		return errors.Join(err, serr)
	}
	return err
}

// setConditions writes the status when the conditions differ from hc's.
func (c *Controller) setConditions(ctx context.Context, u *unstructured.Unstructured, hc *HelmChart, conds ...Condition) error {
	if len(conds) == len(hc.Status.Conditions) {
		same := true
		for _, want := range conds {
			if got := condition(hc.Status.Conditions, want.Type); got == nil || *got != want {
				same = false
			}
		}
		if same {
			return nil
		}
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": conds}})
	if err != nil {
		return err
	}
	_, err = c.dyn.Resource(HelmChartResource).Namespace(u.GetNamespace()).Patch(ctx, u.GetName(), types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func condition(conds []Condition, typ string) *Condition {
	for i := range conds {
		if conds[i].Type == typ {
			return &conds[i]
		}
	}
	return nil
}

// reportUnused says once per generation which fields of k3s's install Job
// are accepted and not used.
func (c *Controller) reportUnused(u *unstructured.Unstructured, hc *HelmChart) {
	var unused []string
	spec := &hc.Spec
	if spec.JobImage != "" {
		unused = append(unused, "spec.jobImage")
	}
	if spec.BackOffLimit != nil {
		unused = append(unused, "spec.backOffLimit")
	}
	if len(spec.PodSecurityContext) > 0 && string(spec.PodSecurityContext) != "null" {
		unused = append(unused, "spec.podSecurityContext")
	}
	if len(spec.SecurityContext) > 0 && string(spec.SecurityContext) != "null" {
		unused = append(unused, "spec.securityContext")
	}
	if spec.DockerRegistrySecret != nil {
		unused = append(unused, "spec.dockerRegistrySecret")
	}
	if len(unused) == 0 {
		return
	}
	c.reportMu.Lock()
	r := c.reported[hc.UID]
	seen := r.ignoredGen == hc.Generation
	r.ignoredGen = hc.Generation
	c.reported[hc.UID] = r
	c.reportMu.Unlock()
	if !seen {
		c.recorder.Eventf(u, corev1.EventTypeNormal, reasonNotUsed,
			"%s not used: edgeplane installs charts in its own process, without a Job or its image", strings.Join(unused, ", "))
	}
}

// setWarning remembers the last warning of a HelmChart; it reports whether
// it differs from the one before.
func (c *Controller) setWarning(uid types.UID, w string) bool {
	c.reportMu.Lock()
	defer c.reportMu.Unlock()
	r := c.reported[uid]
	changed := r.warning != w
	r.warning = w
	c.reported[uid] = r
	return changed
}

func (c *Controller) forget(uid types.UID) {
	c.reportMu.Lock()
	defer c.reportMu.Unlock()
	delete(c.reported, uid)
}

// releaseInfo is what the labels of a release's newest record say.
type releaseInfo struct {
	revision int
	status   string
	hash     string
}

// lastRelease reads the labels of the release's records (metadata only:
// the records themselves can be large).
func (c *Controller) lastRelease(ctx context.Context, p *plan) (releaseInfo, error) {
	resource := schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	if p.Driver == "configmap" {
		resource.Resource = "configmaps"
	}
	list, err := c.meta.Resource(resource).Namespace(p.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "owner=helm,name=" + p.Release})
	if err != nil {
		return releaseInfo{}, fmt.Errorf("release %s in %s: %w", p.Release, p.Namespace, err)
	}
	var out releaseInfo
	for _, item := range list.Items {
		v, err := strconv.Atoi(item.Labels["version"])
		if err == nil && v > out.revision {
			out = releaseInfo{revision: v, status: item.Labels["status"], hash: item.Labels[LabelConfigHash]}
		}
	}
	return out, nil
}
