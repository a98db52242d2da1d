package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/edgeplane/edgeplane/internal/kubeclient"
	"github.com/edgeplane/edgeplane/pkg/nodeconfig"
)

// An agent keeps the cluster's settings for nodes (pkg/nodeconfig) on disk
// at each start that reads them (Paths.ClusterSettings), so that a node
// whose servers are all unreachable when it starts (a partition, a board
// rebooted while its link is down) starts its kubelet from them and runs
// its pods again. A server that answers is always asked first: kept
// settings never win over a server's, and a server that refuses the node
// ends the start as it did before.

// keptSettings is the file's content: the ConfigMap's data, as the server
// published it (nodeconfig.Config.Data), parsed again by nodeconfig.Parse
// when read, so that a kept file passes the checks a fetched one does.
type keptSettings struct {
	// ConfigMap names where the settings came from, for a reader.
	ConfigMap string            `json:"configMap"`
	Data      map[string]string `json:"data"`
}

// saveClusterSettings writes nc to p.ClusterSettings, 0600, atomically,
// and only when it changed (an SD card counts every write).
func saveClusterSettings(p Paths, nc nodeconfig.Config) error {
	b, err := json.MarshalIndent(keptSettings{ConfigMap: nodeconfig.Namespace + "/" + nodeconfig.Name, Data: nc.Data()}, "", "  ")
	if err != nil {
		return fmt.Errorf("node: cluster settings: %w", err)
	}
	return writeFile(p.ClusterSettings, append(b, '\n'), 0o600)
}

// loadClusterSettings reads the settings kept at p.ClusterSettings: nil
// and no error when there are none; an error naming the file when it
// cannot be read, does not parse, or holds settings this node does not
// run.
func loadClusterSettings(p Paths) (*nodeconfig.Config, error) {
	b, err := os.ReadFile(p.ClusterSettings)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var k keptSettings
	if err := dec.Decode(&k); err != nil {
		return nil, fmt.Errorf("%s: %w", p.ClusterSettings, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: data after the settings", p.ClusterSettings)
	}
	if len(k.Data) == 0 {
		return nil, fmt.Errorf("%s: no settings in it", p.ClusterSettings)
	}
	nc, err := nodeconfig.Parse(k.Data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p.ClusterSettings, err)
	}
	if _, err := NetworkOf(nc); err != nil {
		return nil, fmt.Errorf("%s: %w", p.ClusterSettings, err)
	}
	return &nc, nil
}

// The first round of an agent that holds kept settings asks each server
// once, each for at most offlineAttempt, all of them within offlineRound.
// A server that is up answers a GET of one ConfigMap in well under a
// second, even on a busy board over a slow link, so 5 s tells "down" from
// "slow"; a server that is down refuses at once or, when its host is gone,
// never answers, and then 15 s in all (three unanswered servers) is how
// long a node rebooted into a partition waits before its pods run again,
// short against the 40 s the node lifecycle controller allows a node's
// status. A server slower than that gets the node started from its kept
// settings, which it wrote the last time it read them; its parts then
// reach the servers through the node-local API endpoint anyway.
const (
	offlineAttempt = 5 * time.Second
	offlineRound   = 15 * time.Second
)

// clusterOrKept reads the cluster's settings from the servers (clients,
// --server first), keeping them on disk; when none of them answers and
// the node kept settings at an earlier start, the node starts from those.
// Kept settings that cannot be read are logged once and ignored. Without
// usable kept settings, or when a server answers but cannot serve yet, it
// is fetchCluster: retried, then an error.
func clusterOrKept(ctx context.Context, clients []kubernetes.Interface, p Paths) (Cluster, error) {
	logger := klog.FromContext(ctx)
	kept, err := loadClusterSettings(p)
	if err != nil {
		logger.Info("Ignoring the cluster settings kept on disk: the node needs a server to start", "file", p.ClusterSettings, "err", err.Error())
	}
	if kept == nil {
		return fetchCluster(ctx, clients, p)
	}
	nc, err := fetchRound(ctx, clients, offlineAttempt, offlineRound)
	switch {
	case err == nil:
		return keepCluster(ctx, nc, p)
	case ctx.Err() != nil:
		return Cluster{}, fmt.Errorf("node: reading the cluster's settings for nodes: %w", context.Cause(ctx))
	case unreachable(err):
		logger.Info("No API server answers: the node starts from the cluster settings kept on disk", "file", p.ClusterSettings, "servers", len(clients), "err", err.Error())
		c, err := clusterOf(*kept, p)
		c.Offline = true
		return c, err
	case !kubeclient.Transient(err):
		return Cluster{}, fmt.Errorf("node: reading the cluster's settings for nodes: %w", err)
	}
	// A server answers but is not serving yet (starting, busy): wait
	// for it as a node without kept settings does.
	return fetchCluster(ctx, clients, p)
}

// fetchRound asks each client once, each for at most attempt, all within
// round, and returns the first settings read. A refusal ends the round at
// once; otherwise the error is an answer that may pass (a server starting)
// when a server gave one, else the last failure to reach one.
func fetchRound(ctx context.Context, clients []kubernetes.Interface, attempt, round time.Duration) (nodeconfig.Config, error) {
	ctx, cancel := context.WithTimeout(ctx, round)
	defer cancel()
	var answered, last error
	for _, client := range clients {
		nc, err := func() (nodeconfig.Config, error) {
			ctx, cancel := context.WithTimeout(ctx, attempt)
			defer cancel()
			return nodeconfig.Fetch(ctx, client)
		}()
		switch {
		case err == nil:
			return nc, nil
		case !kubeclient.Transient(err):
			return nodeconfig.Config{}, err
		case !unreachable(err):
			answered = err
		}
		last = err
		if ctx.Err() != nil {
			break
		}
	}
	if answered != nil {
		return nodeconfig.Config{}, answered
	}
	return nodeconfig.Config{}, last
}

// unreachable tells whether err is a failure to reach a server at all (a
// refused or reset connection, a timeout, no route), as opposed to an
// answer of the server's.
func unreachable(err error) bool {
	var status apierrors.APIStatus
	return kubeclient.Transient(err) && !errors.As(err, &status)
}

// clusterOf is the node's Cluster for the settings nc: their network, and
// the client CA written where the kubelet reads it.
func clusterOf(nc nodeconfig.Config, p Paths) (Cluster, error) {
	network, err := NetworkOf(nc)
	if err != nil {
		return Cluster{}, err
	}
	if err := writeFile(p.ClientCA, nc.ClientCA, 0o644); err != nil {
		return Cluster{}, err
	}
	return Cluster{Config: nc, ClientCAFile: p.ClientCA, Network: network}, nil
}

// keepCluster is clusterOf for settings a server gave, which it keeps on
// disk for a start with no server. A write that fails is logged: the node
// runs, and a start with no server then fails as it did before.
func keepCluster(ctx context.Context, nc nodeconfig.Config, p Paths) (Cluster, error) {
	c, err := clusterOf(nc, p)
	if err != nil {
		return Cluster{}, err
	}
	if err := saveClusterSettings(p, nc); err != nil {
		klog.FromContext(ctx).Error(err, "Keeping the cluster settings on disk: a start with no API server answering will fail", "file", p.ClusterSettings)
	}
	return c, nil
}
