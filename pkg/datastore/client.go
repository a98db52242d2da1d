package datastore

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/klog/v2"
)

// newClient returns an etcd3 client for cc, logging to lg.
func newClient(cc ClientConfig, lg logr.Logger) (*clientv3.Client, error) {
	cfg := clientv3.Config{
		Endpoints:   cc.Endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      ZapLogger(lg),
	}
	if cc.CAFile != "" || cc.CertFile != "" {
		tlsInfo := transport.TLSInfo{TrustedCAFile: cc.CAFile, CertFile: cc.CertFile, KeyFile: cc.KeyFile}
		tlsCfg, err := tlsInfo.ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("datastore: client TLS: %w", err)
		}
		cfg.TLS = tlsCfg
	}
	return clientv3.New(cfg)
}

// waitForGet polls a Get through a real client until it succeeds, stopped is
// closed, or ctx is done.
func waitForGet(ctx context.Context, cc ClientConfig, stopped <-chan struct{}) error {
	lg := klog.FromContext(ctx).WithName("datastore-client")
	cli, err := newClient(cc, lg)
	if err != nil {
		return err
	}
	defer cli.Close()

	const interval = 200 * time.Millisecond
	var lastErr error
	for {
		attemptCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := cli.Get(attemptCtx, "health")
		cancel()
		if err == nil {
			return nil
		}
		lastErr = err
		lg.V(vDebug).Info("Datastore not ready yet", "err", err)

		timer := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			timer.Stop()
			return fmt.Errorf("datastore: not ready: %w (last error: %v)", context.Cause(ctx), lastErr)
		case <-stopped:
			timer.Stop()
			return fmt.Errorf("datastore: stopped before it became ready")
		case <-timer.C:
		}
	}
}
