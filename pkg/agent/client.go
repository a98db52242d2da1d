package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
)

// WaitForClient polls, once a second until ctx ends, for the node's
// kubeconfig (written by the kubelet's TLS bootstrap on an agent, so it may
// appear only after start) and the certificate it names, and builds a client
// from it that identifies itself as userAgent.
func WaitForClient(ctx context.Context, kubeconfig, userAgent string) (kubernetes.Interface, error) {
	var client kubernetes.Interface
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(context.Context) (bool, error) {
		if _, err := os.Stat(kubeconfig); err != nil {
			return false, nil
		}
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return false, nil
		}
		// TLS bootstrap writes the kubeconfig before the certificate it names.
		if cfg.CertFile != "" {
			if _, err := os.Stat(cfg.CertFile); err != nil {
				return false, nil
			}
		}
		cfg.UserAgent = userAgent
		c, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return false, fmt.Errorf("%s: %w", userAgent, err)
		}
		client = c
		return true, nil
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		klog.FromContext(ctx).Error(err, "No client from the node's kubeconfig", "userAgent", userAgent)
	}
	return client, err
}
