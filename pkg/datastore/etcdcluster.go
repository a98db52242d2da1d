package datastore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"k8s.io/klog/v2"

	"github.com/edgeplane/edgeplane/internal/atomicfile"
)

// EtcdCluster makes the embedded etcd one member of a cluster of edgeplane
// servers instead of a loopback-only single member.
type EtcdCluster struct {
	// Name is this member's name, unique in the cluster (see MemberName).
	Name string
	// Host is the address peers and clients reach this member at.
	Host                 string
	ClientPort, PeerPort int
	// JoinEndpoints are client URLs of the existing cluster; empty on the
	// first server (--cluster-init). Ignored once this member has data.
	JoinEndpoints []string
}

// memberNameFile keeps the member name under <data-dir>/db.
const memberNameFile = "etcd-member-name"

// MemberName returns the member name kept in <data-dir>/db, creating
// "<hostname>-<random>" the first time: hosts may share a hostname.
func MemberName(dataDir string) (string, error) {
	path := filepath.Join(dataDir, "db", memberNameFile)
	if b, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(b)) != "" {
		return strings.TrimSpace(string(b)), nil
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "edgeplane"
	}
	suffix, err := randomHex(4)
	if err != nil {
		return "", err
	}
	name := strings.ToLower(host) + "-" + suffix
	if err := ensurePrivateDir(filepath.Dir(path)); err != nil {
		return "", err
	}
	// Durably: the member name must match the one etcd stored in its data.
	if _, err := atomicfile.Write(path, []byte(name+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("datastore: %w", err)
	}
	return name, nil
}

func (c *EtcdCluster) clientURL() url.URL {
	return url.URL{Scheme: "https", Host: net.JoinHostPort(c.Host, strconv.Itoa(c.ClientPort))}
}

func (c *EtcdCluster) peerURL() url.URL {
	return url.URL{Scheme: "https", Host: net.JoinHostPort(c.Host, strconv.Itoa(c.PeerPort))}
}

// applyCluster turns cfg (built for a single member) into this member's
// config. A new member joining an existing cluster is added to it first;
// the member is added once, and a retry finds it in the member list.
func (s *etcdStore) applyCluster(ctx context.Context, cfg *embed.Config, lg logr.Logger) error {
	c := s.opts.Cluster
	cfg.Name = c.Name
	client, peer := c.clientURL(), c.peerURL()
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = c.Name + "=" + peer.String()
	cfg.ClusterState = embed.ClusterStateFlagNew
	// The peer port is reachable by other hosts: peers must present a
	// certificate of our etcd CA.
	cfg.PeerTLSInfo.ClientCertAuth = true
	cfg.StrictReconfigCheck = true
	// Peers on other hosts: etcd's own raft timers, not the lone member's.
	defaults := embed.NewConfig()
	cfg.TickMs, cfg.ElectionMs = defaults.TickMs, defaults.ElectionMs

	if _, err := os.Stat(filepath.Join(s.dir, "member")); err == nil || len(c.JoinEndpoints) == 0 {
		return nil // a restart (the data dir knows the cluster) or the first server
	}
	cli, err := newClient(ClientConfig{
		Endpoints: c.JoinEndpoints,
		CAFile:    s.opts.EtcdCAFile, CertFile: s.opts.EtcdClientCertFile, KeyFile: s.opts.EtcdClientKeyFile,
	}, lg)
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	members, err := addMember(ctx, cli, peer.String())
	// The leader refuses new members until every member has been connected
	// for a few seconds (strict reconfiguration check): retry.
	for err != nil && strings.Contains(err.Error(), "unhealthy cluster") && ctx.Err() == nil {
		lg.Info("The etcd cluster is not ready for a new member yet; retrying", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
		members, err = addMember(ctx, cli, peer.String())
	}
	if err != nil {
		return fmt.Errorf("datastore: joining the etcd cluster at %s: %w", strings.Join(c.JoinEndpoints, ","), err)
	}
	var initial []string
	for _, m := range members {
		name := m.Name
		if name == "" { // the member being added (this one) has not started yet
			if !containsString(m.PeerURLs, peer.String()) {
				continue
			}
			name = c.Name
		}
		for _, u := range m.PeerURLs {
			initial = append(initial, name+"="+u)
		}
	}
	cfg.InitialCluster = strings.Join(initial, ",")
	cfg.ClusterState = embed.ClusterStateFlagExisting
	lg.Info("Added this server to the etcd cluster", "member", c.Name, "peerURL", peer.String(), "initialCluster", cfg.InitialCluster)
	return nil
}

// addMember adds peerURL as a member unless it already is one, and returns
// the members.
func addMember(ctx context.Context, cli *clientv3.Client, peerURL string) ([]*memberInfo, error) {
	// Serializable: once a member is added but not started, a two-member
	// cluster has no quorum for a linearizable read.
	list, err := cli.MemberList(ctx, clientv3.WithSerializable())
	if err != nil {
		return nil, err
	}
	members := list.Members
	found := false
	for _, m := range list.Members {
		if containsString(m.PeerURLs, peerURL) {
			if m.Name != "" {
				return nil, fmt.Errorf("member %q already has peer URL %s; remove it first (edgeplane etcd member remove %s)", m.Name, peerURL, m.Name)
			}
			found = true
		}
	}
	if !found {
		// As a learner: a voting member that has not started would cost the
		// cluster its quorum until it does.
		resp, err := cli.MemberAddAsLearner(ctx, []string{peerURL})
		if err != nil {
			return nil, err
		}
		members = resp.Members
	}
	out := make([]*memberInfo, 0, len(members))
	for _, m := range members {
		out = append(out, &memberInfo{Name: m.Name, PeerURLs: m.PeerURLs})
	}
	return out, nil
}

type memberInfo struct {
	Name     string
	PeerURLs []string
}

func containsString(list []string, s string) bool { return slices.Contains(list, s) }

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("datastore: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// ValidateCluster reports problems with an EtcdCluster.
func (c *EtcdCluster) Validate() []error {
	var errs []error
	if c.Name == "" {
		errs = append(errs, errors.New("etcd cluster: no member name"))
	}
	if net.ParseIP(c.Host) == nil {
		errs = append(errs, fmt.Errorf("etcd cluster: member address %q is not an IP address", c.Host))
	}
	for _, p := range []struct {
		flag string
		port int
	}{{"--etcd-client-port", c.ClientPort}, {"--etcd-peer-port", c.PeerPort}} {
		if p.port <= 0 || p.port > 65535 {
			errs = append(errs, fmt.Errorf("%s %d is not between 1 and 65535", p.flag, p.port))
		}
	}
	if c.ClientPort == c.PeerPort {
		errs = append(errs, errors.New("--etcd-client-port and --etcd-peer-port must differ"))
	}
	return errs
}

// promoteInterval paces the promotion attempts of a new member.
const promoteInterval = 500 * time.Millisecond

// promote makes this member a voter once it has caught up with the leader.
// A new member joins as a learner so that the cluster keeps its quorum while
// the member starts; the API server can use it only once it votes.
func (s *etcdStore) promote(ctx context.Context, e *embed.Etcd) error {
	if s.opts.Cluster == nil {
		return nil
	}
	self := e.Server.MemberID()
	if m := e.Server.Cluster().Member(self); m == nil || !m.IsLearner {
		return nil
	}
	var eps []string
	for _, m := range e.Server.Cluster().Members() {
		if m.ID != self {
			eps = append(eps, m.ClientURLs...)
		}
	}
	lg := klog.FromContext(ctx).WithName("etcd")
	cli, err := newClient(ClientConfig{
		Endpoints: eps,
		CAFile:    s.opts.EtcdCAFile, CertFile: s.opts.EtcdClientCertFile, KeyFile: s.opts.EtcdClientKeyFile,
	}, lg)
	if err != nil {
		return err
	}
	defer cli.Close()
	for {
		_, err := cli.MemberPromote(ctx, uint64(self))
		switch {
		case err == nil:
			// The leader has applied the promotion; this member applies
			// it when the entry reaches it, and until then refuses writes
			// as a learner ("rpc not supported for learner").
			if err := waitVoter(ctx, e); err != nil {
				return err
			}
			lg.Info("This server's etcd member now votes", "member", s.opts.Cluster.Name)
			return nil
		case strings.Contains(err.Error(), "can only promote a learner member") && !strings.Contains(err.Error(), "in sync"):
			// etcd's ErrMemberNotLearner: this member votes already.
			return waitVoter(ctx, e)
		}
		lg.V(2).Info("Waiting to promote this etcd member", "err", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("datastore: promoting this etcd member to a voter: %w (last error: %v)", context.Cause(ctx), err)
		case <-time.After(promoteInterval):
		}
	}
}

// voterPoll paces the wait for this member to apply its own promotion.
const voterPoll = 20 * time.Millisecond

// waitVoter waits until this member has applied its promotion: the
// promotion is committed when the leader answers, and this member serves
// writes only once it has applied it too.
func waitVoter(ctx context.Context, e *embed.Etcd) error {
	for e.Server.IsLearner() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("datastore: waiting for this etcd member to apply its promotion to a voter: %w", context.Cause(ctx))
		case <-e.Server.StopNotify():
			return errors.New("datastore: etcd stopped while this member applied its promotion to a voter")
		case <-time.After(voterPoll):
		}
	}
	return nil
}
