package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// startControllers starts kube-controller-manager and kube-scheduler for
// in's kube-apiserver with the flags kubeadm gives them
// (cmd/kubeadm/app/phases/controlplane/manifests.go), each with its own
// kubeconfig and client certificate (pki.go), at once with the apiserver, as
// the kubelet starts kubeadm's static pods: they wait for the apiserver
// themselves.
func startControllers(in *instance, binDir, pki string, env []string, logName func(string) string) error {
	// kubeconfigs resolve relative paths from their own directory.
	pki, err := filepath.Abs(pki)
	if err != nil {
		return err
	}
	pk := func(n string) string { return filepath.Join(pki, n) }
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	kubeconfig := func(name string) (string, error) {
		path := pk(name + ".conf")
		cfg := clientcmdapi.NewConfig()
		cfg.Clusters["kubernetes"] = &clientcmdapi.Cluster{Server: in.host, CertificateAuthority: pk("ca.crt")}
		cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{ClientCertificate: pk(name + ".crt"), ClientKey: pk(name + ".key")}
		cfg.Contexts[name] = &clientcmdapi.Context{Cluster: "kubernetes", AuthInfo: name}
		cfg.CurrentContext = name
		return path, clientcmd.WriteToFile(*cfg, path)
	}
	kcm, err := kubeconfig("controller-manager")
	if err != nil {
		return err
	}
	sched, err := kubeconfig("scheduler")
	if err != nil {
		return err
	}
	procs := []struct {
		name string
		args []string
	}{{"kube-controller-manager", []string{
		"--authentication-kubeconfig=" + kcm,
		"--authorization-kubeconfig=" + kcm,
		"--kubeconfig=" + kcm,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(ports[0]),
		"--client-ca-file=" + pk("ca.crt"),
		"--cluster-name=kubernetes",
		"--cluster-signing-cert-file=" + pk("ca.crt"),
		"--cluster-signing-key-file=" + pk("ca.key"),
		"--controllers=*,bootstrapsigner,tokencleaner",
		"--leader-elect=true",
		"--requestheader-client-ca-file=" + pk("front-proxy-ca.crt"),
		"--root-ca-file=" + pk("ca.crt"),
		"--service-account-private-key-file=" + pk("sa.key"),
		"--use-service-account-credentials=true",
	}}, {"kube-scheduler", []string{
		"--authentication-kubeconfig=" + sched,
		"--authorization-kubeconfig=" + sched,
		"--kubeconfig=" + sched,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(ports[1]),
		"--leader-elect=true",
	}}}
	for _, p := range procs {
		pr, err := startProc(p.name, filepath.Join(binDir, p.name), p.args, env, logName(p.name))
		if err != nil {
			return err
		}
		in.procs = append(in.procs, pr)
	}
	return nil
}

// waitLeaders waits until kube-controller-manager and kube-scheduler hold
// their leader leases, the moment each starts its controllers (edgeplane's
// ready line comes once its own have started), and returns the time since
// exec.
func (in *instance) waitLeaders(timeout time.Duration) (time.Duration, error) {
	cs, err := kubernetes.NewForConfig(in.rest)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		for _, p := range in.procs {
			if p.exited() {
				return 0, fmt.Errorf("%s exited (%v):\n%s", p.name, p.err, p.tail(15))
			}
		}
		led := 0
		for _, name := range []string{"kube-controller-manager", "kube-scheduler"} {
			l, err := cs.CoordinationV1().Leases("kube-system").Get(ctx, name, metav1.GetOptions{})
			if err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
				led++
			}
		}
		if led == 2 {
			return time.Since(in.started), nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("controller-manager and scheduler not leading after %s", timeout)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
