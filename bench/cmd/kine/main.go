// Command kine serves kine's etcd3 gRPC bridge over SQLite on a TCP port, the
// way k3s's external kine runs, for the benchmark's "upstream kube-apiserver
// on kine" configuration. It uses kine's own endpoint package (all drivers
// linked) with kine's command-line defaults.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/k3s-io/kine/pkg/endpoint"
)

func main() {
	listen := flag.String("listen-address", "127.0.0.1:2379", "address to serve etcd3 gRPC on")
	ep := flag.String("endpoint", "sqlite://./db/state.db", "datastore DSN")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	wg := &sync.WaitGroup{}
	_, err := endpoint.Listen(ctx, endpoint.Config{
		WaitGroup:           wg,
		Listener:            *listen,
		Endpoint:            *ep,
		NotifyInterval:      5 * time.Second,
		EmulatedETCDVersion: "3.6.11",
		CompactTimeout:      5 * time.Second,
		CompactMinRetain:    1000,
		CompactBatchSize:    1000,
		PollBatchSize:       500,
		PollInterval:        time.Second,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "kine:", err)
		os.Exit(1)
	}
	<-ctx.Done()
	wg.Wait()
}
