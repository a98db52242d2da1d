package e2e

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// errorLine matches the header of a klog error entry at -v 0: E, the date
// and time, the thread id, file:line].
var errorLine = regexp.MustCompile(`^E\d{4} \d\d:\d\d:\d\d\.\d{6}\s+\d+ \S+:\d+\] `)

// errorLines are the error entries in a server's output but those that
// contain one of except.
func errorLines(out string, except ...string) []string {
	var lines []string
	for _, line := range strings.Split(out, "\n") {
		if errorLine.MatchString(line) && !slices.ContainsFunc(except, func(e string) bool { return strings.Contains(line, e) }) {
			lines = append(lines, line)
		}
	}
	return lines
}

// TestQuietStartStop: a first start on a fresh data dir, the cluster's
// first work (the CoreDNS ReplicaSet makes its pod, the scheduler finds no
// node for it, the API server records legacy token tracking in
// kube-system), and a clean stop print no error line, on both datastores.
// A fresh start printed up to four: "Error while syncing ConfigMap ...
// namespaces "kube-system" not found" (the legacy token tracking controller
// ran before kube-system existed), the ReplicaSet controller's "read
// version: N is not as new as written version: M", the watch cache's
// "failed to sync with latest state: context canceled", and on embedded
// etcd its "failed to update storage version ... missing term
// information". With a node, TestMakeRun checks the same.
func TestQuietStartStop(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the real server")
	}
	parallelSubtests(t)
	for _, ds := range datastoreCases {
		t.Run(ds, func(t *testing.T) {
			parallel(t)
			s := startServer(t, t.TempDir(), "--datastore", ds)
			eventually(t, time.Minute, "the CoreDNS pod found unschedulable", func(ctx context.Context) (bool, error) {
				rss, err := s.client.AppsV1().ReplicaSets("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"})
				if err != nil || len(rss.Items) != 1 {
					return false, fmt.Errorf("ReplicaSets: %v, %v", rss, err)
				}
				rs := rss.Items[0]
				if rs.Status.ObservedGeneration != rs.Generation || rs.Spec.Replicas == nil || rs.Status.Replicas != *rs.Spec.Replicas {
					return false, fmt.Errorf("ReplicaSet status %+v", rs.Status)
				}
				pods, err := s.client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"})
				if err != nil || len(pods.Items) == 0 {
					return false, fmt.Errorf("pods: %v", err)
				}
				return slices.ContainsFunc(pods.Items[0].Status.Conditions, func(c corev1.PodCondition) bool {
					return c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse
				}), fmt.Errorf("pod status %+v", pods.Items[0].Status)
			})
			// Stopped while a controller's request is in flight, the API
			// server logs the request's cancellation as a handler timeout
			// ("Post-timeout activity"): the check is of a settled start.
			eventually(t, time.Minute, "the CoreDNS Deployment's status settled", func(ctx context.Context) (bool, error) {
				d, err := s.client.AppsV1().Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
				if err != nil {
					return false, err
				}
				return d.Status.ObservedGeneration == d.Generation && d.Status.Replicas == 1 && d.Status.UnavailableReplicas == 1,
					fmt.Errorf("Deployment status %+v", d.Status)
			})
			eventually(t, time.Minute, "the legacy token tracking ConfigMap", func(ctx context.Context) (bool, error) {
				_, err := s.client.CoreV1().ConfigMaps("kube-system").Get(ctx, "kube-apiserver-legacy-service-account-token-tracking", metav1.GetOptions{})
				return err == nil, err
			})
			// The helm-controller applies its CRDs in the background after
			// the server is ready; stopped while it does, its cancelled
			// apply is logged as above (seen once in CI).
			ext := apiextensionsclient.NewForConfigOrDie(s.config)
			for _, name := range []string{"helmcharts.helm.cattle.io", "helmchartconfigs.helm.cattle.io"} {
				eventually(t, time.Minute, "the CRD "+name+" established", func(ctx context.Context) (bool, error) {
					crd, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{})
					if err != nil {
						return false, err
					}
					return slices.ContainsFunc(crd.Status.Conditions, func(c apiextensionsv1.CustomResourceDefinitionCondition) bool {
						return c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue
					}), fmt.Errorf("CRD conditions %+v", crd.Status.Conditions)
				})
			}
			s.stop()
			if lines := errorLines(s.output.String()); len(lines) > 0 {
				t.Errorf("%d error lines from start to stop:\n%s", len(lines), strings.Join(lines, "\n"))
			}
		})
	}
}

func TestErrorLines(t *testing.T) {
	out := `I1206 03:10:22.693045   18378 run.go:89] "Starting edgeplane"
E1206 03:10:23.155673   18378 watcher.go:458] failed to sync with latest state: context canceled
W1206 03:10:27.344180   18378 probe.go:275] Flexvolume plugin directory
Error: not a klog line
E1206 03:10:29.192031   18378 replica_set.go:640] "Unhandled Error"`
	got := errorLines(out)
	if len(got) != 2 || !strings.Contains(got[0], "watcher.go") || !strings.Contains(got[1], "replica_set.go") {
		t.Fatalf("errorLines = %q", got)
	}
	if got := errorLines(out, "context canceled"); len(got) != 1 || !strings.Contains(got[0], "replica_set.go") {
		t.Fatalf("errorLines but context canceled = %q", got)
	}
}
