package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/edgeplane/edgeplane/pkg/controllers"
	"github.com/edgeplane/edgeplane/pkg/kubeadmcompat"
	"github.com/edgeplane/edgeplane/pkg/nodeconfig"
	"github.com/edgeplane/edgeplane/pkg/nodetoken"
)

// serveMain runs one upstream configuration until SIGTERM, ready for nodes
// to join as they join edgeplane (bench/nodes.sh): `bench -serve NAME
// -serve-dir DIR` starts it on DIR, publishes what a joining node reads
// (kubeadm's cluster-info and RBAC, edgeplane's node settings), writes a
// node token to DIR/node-token and an admin kubeconfig to
// DIR/admin.kubeconfig, and prints one line:
//
//	serving NAME pids=P1,P2,... data-dir=DIR
func serveMain(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	binDir := fs.String("bin", "bench/bin", "directory with kube-apiserver, etcd, kube-controller-manager, kube-scheduler")
	name := fs.String("serve", "", "the upstream configuration to run")
	dir := fs.String("serve-dir", "", "its data dir")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c, ok := configByName(*name)
	if !ok || c.Edgeplane || !c.Controllers {
		return fmt.Errorf("-serve %q: want an upstream configuration with controllers (upstream-kubeadm); edgeplane serves nodes by itself", *name)
	}
	if *dir == "" {
		return errors.New("-serve-dir is required")
	}
	abs, err := filepath.Abs(*dir)
	if err != nil {
		return err
	}
	if err := prepare(c, abs); err != nil {
		return err
	}
	in, err := start(c, *binDir, abs, filepath.Join(abs, "logs"), nil, nil)
	if err != nil {
		return err
	}
	defer func() {
		if err := in.stop(); err != nil {
			logf("%s: %v", c.Name, err)
		}
	}()
	ready, _, err := in.waitReady(ctx, 3*time.Minute)
	if err != nil {
		return err
	}
	if _, err := in.waitAllReady(2*time.Minute, ready); err != nil {
		return err
	}
	if err := publishForNodes(ctx, in, abs); err != nil {
		return err
	}
	pids := make([]string, 0, len(in.procs))
	for _, pid := range in.pids() {
		pids = append(pids, strconv.Itoa(pid))
	}
	fmt.Printf("serving %s pids=%s data-dir=%s\n", c.Name, strings.Join(pids, ","), abs)
	<-ctx.Done()
	return nil
}

// publishForNodes does for an upstream control plane what edgeplane does at
// start for its nodes (pkg/bootstrap: nodejoin.go, node.go), with the same
// packages, so that the hollow nodes join both the same way.
func publishForNodes(ctx context.Context, in *instance, dir string) error {
	cs, err := kubernetes.NewForConfig(in.rest)
	if err != nil {
		return err
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, "pki", "ca.crt"))
	if err != nil {
		return err
	}
	v, err := cs.Discovery().ServerVersion()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := kubeadmcompat.Ensure(ctx, cs, kubeadmcompat.Config{
		ServerURL: in.host, CAPEM: caPEM, KubernetesVersion: v.GitVersion,
		ServiceCIDR: "10.96.0.0/12", ClusterDomain: "cluster.local",
	}); err != nil {
		return fmt.Errorf("kubeadm cluster-info and RBAC: %w", err)
	}
	// kubeadm's kubelet-bootstrap and certificate-rotation bindings, as
	// edgeplane's controllers make them, and kubeadm's own auto-approval of
	// node token client requests: an upstream control plane has no
	// edgeplane approver to decide them.
	if err := controllers.EnsureNodeBootstrapRBAC(ctx, cs); err != nil {
		return fmt.Errorf("node bootstrap RBAC: %w", err)
	}
	autoApprove := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "kubeadm:node-autoapprove-bootstrap"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:certificates.k8s.io:certificatesigningrequests:nodeclient"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: nodetoken.NodeGroup}},
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, autoApprove, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("kubeadm's node auto-approval: %w", err)
	}
	// kubeadm's one CA signs the API server's kubelet client certificate.
	if err := nodeconfig.Publish(ctx, cs, nodeconfig.Config{ClientCA: caPEM, ClusterDomain: "cluster.local"}); err != nil {
		return err
	}
	if _, err := nodetoken.EnsureDefault(ctx, cs, dir, caPEM); err != nil {
		return err
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["upstream"] = &clientcmdapi.Cluster{Server: in.host, CertificateAuthority: in.rest.CAFile}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificate: in.rest.CertFile, ClientKey: in.rest.KeyFile}
	kc.Contexts["admin"] = &clientcmdapi.Context{Cluster: "upstream", AuthInfo: "admin"}
	kc.CurrentContext = "admin"
	return clientcmd.WriteToFile(*kc, filepath.Join(dir, "admin.kubeconfig"))
}
