package datastore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"sync"
	"time"

	"github.com/k3s-io/kine/pkg/drivers"
	"github.com/k3s-io/kine/pkg/server"
	"github.com/sirupsen/logrus"
	"go.etcd.io/etcd/server/v3/embed"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"k8s.io/klog/v2"

	// The kine drivers edgeplane ships; each registers its DSN schemes with
	// kine's driver registry when imported. sqlite:// is the default
	// datastore; postgres:// is kept for an external datastore.
	//
	// kine's pkg/endpoint is deliberately not imported: it blank-imports every
	// kine driver (mysql, nats with an embedded NATS server, t4 with pebble and
	// an S3 client, ...) and so links them all into the binary; see
	// docs/PERFORMANCE.md for what that cost.
	_ "github.com/k3s-io/kine/pkg/drivers/pgsql"
)

const (
	// kineGracefulStop bounds the graceful stop of kine's gRPC server, as
	// kine's own endpoint does.
	kineGracefulStop = 2 * time.Second
	// grpcOverheadBytes is the room kine leaves above etcd's request limit.
	grpcOverheadBytes = 512 * 1024
)

// kineServeConfig configures serveKine.
type kineServeConfig struct {
	Driver         drivers.Config // Endpoint ("sqlite://...", "postgres://...") and tuning
	SocketPath     string         // unix socket to serve etcd3 gRPC on (created 0600)
	NotifyInterval time.Duration  // watch progress notifications
	CommitWindow   time.Duration  // SQLite: how long a Lease write waits for company (sqlitegroup.go)
	ETCDVersion    string         // etcd version kine reports (the apiserver checks it)
	// ServeFailed is called, once, when the gRPC server stops serving on
	// its own (its listener failed), not when ctx stopped it.
	ServeFailed func(error)
}

// serveKine starts kine's etcd3 gRPC bridge over the driver for
// cfg.Driver.Endpoint and serves it on cfg.SocketPath, doing for one
// datastore what kine's endpoint.Listen does. It returns the services it
// serves once the socket listens (they can be called in process too,
// inprocess.go). Every goroutine it starts is counted in wg: when ctx is
// cancelled the gRPC server stops (gracefully, for up to two seconds), then
// the driver, which closes the database; wg then reaches zero. On error
// nothing is left running once wg reaches zero.
func serveKine(ctx context.Context, wg *sync.WaitGroup, cfg kineServeConfig) (_ etcdServices, _ net.Listener, rerr error) {
	// The backend outlives ctx: it stops only after the gRPC server has.
	bctx, bcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer func() {
		if rerr != nil {
			bcancel()
		}
	}()

	dcfg := cfg.Driver
	backend, err := newKineBackend(bctx, wg, &dcfg, cfg.CommitWindow)
	if err != nil {
		// Like kine, keep the endpoint (it may carry credentials) out of the error.
		return etcdServices{}, nil, fmt.Errorf("creating kine driver: %w", err)
	}
	if backend.Backend == nil {
		return etcdServices{}, nil, errors.New("kine driver has no local backend")
	}
	if err := backend.Start(bctx); err != nil {
		return etcdServices{}, nil, fmt.Errorf("starting kine backend: %w", err)
	}

	// Upstream etcd's gRPC limits and keepalives, as kine sets them.
	gs := grpc.NewServer(
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime:             embed.DefaultGRPCKeepAliveMinTime,
			PermitWithoutStream: false,
		}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			Time:    embed.DefaultGRPCKeepAliveInterval,
			Timeout: embed.DefaultGRPCKeepAliveTimeout,
		}),
		grpc.MaxConcurrentStreams(embed.DefaultMaxConcurrentStreams),
		grpc.MaxRecvMsgSize(int(embed.DefaultMaxRequestBytes)+grpcOverheadBytes),
		grpc.MaxSendMsgSize(math.MaxInt32),
	)
	// kine answers a wrong revision to a create of a deleted key
	// (kinefix.go) and hides writes its database refuses; the guard, on top
	// of the fix, reports them (sqliteguard.go).
	lg := klog.FromContext(ctx).WithName("datastore")
	guarded := newWriteGuard(backend, lg)
	// Watches are served by the watch hub instead of kine's watch service
	// (watchhub.go); every other etcd service is kine's.
	hub := newWatchHub(bctx, wg, guarded, lg)
	if backend.feed != nil {
		backend.feed.offerTo(hub.committed)
	}
	bridge := server.New(guarded, "unix", cfg.NotifyInterval, cfg.ETCDVersion)
	ws := &watchServer{hub: hub, notifyInterval: cfg.NotifyInterval}
	registerKine(gs, bridge, ws)

	lis, err := listenUnix(ctx, cfg.SocketPath)
	if err != nil {
		return etcdServices{}, nil, err
	}

	wg.Add(2)
	go func() {
		defer wg.Done()
		// Serve returns nil once GracefulStop or Stop was called (below, on
		// ctx); an error means the listener failed and nothing is served.
		if err := gs.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) && ctx.Err() == nil {
			logrus.Errorf("Kine gRPC server exited: %v", err)
			if cfg.ServeFailed != nil {
				cfg.ServeFailed(fmt.Errorf("kine stopped serving on %s: %w", cfg.SocketPath, err))
			}
		}
	}()
	go func() {
		defer wg.Done()
		<-ctx.Done()
		timer := time.AfterFunc(kineGracefulStop, gs.Stop)
		gs.GracefulStop()
		timer.Stop()
		bcancel()
	}()
	return etcdServices{kv: bridge, lease: bridge, watch: ws, cluster: bridge, maintenance: bridge}, lis, nil
}

// listenUnix listens on a unix socket at path, readable by the owner only.
// The caller has removed a stale socket file.
func listenUnix(ctx context.Context, path string) (net.Listener, error) {
	lc := net.ListenConfig{}
	lis, err := lc.Listen(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		lis.Close()
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	return lis, nil
}
