package certs

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
)

func TestKubeconfigs(t *testing.T) {
	tests := []struct {
		name      string
		port      int
		adminMode os.FileMode
		wantMode  os.FileMode
	}{
		{"default mode", 6443, 0, 0o600},
		{"group-readable admin", 16443, 0o640, 0o640},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := testOptions(t)
			o.APIServerPort = tc.port
			o.AdminKubeconfigMode = tc.adminMode
			p := mustEnsure(t, o)
			caPEM, _ := os.ReadFile(p.ServerCA.Cert)
			for _, k := range []struct {
				path string
				kp   KeyPair
				user string
				mode os.FileMode
			}{
				{p.AdminKubeconfig, p.Admin, "admin", tc.wantMode},
				{p.ControllerManagerKubeconfig, p.ControllerManager, "system:kube-controller-manager", 0o600},
				{p.SchedulerKubeconfig, p.Scheduler, "system:kube-scheduler", 0o600},
			} {
				if filepath.Dir(k.path) != o.KubeconfigDir {
					t.Errorf("%s is not in %s", k.path, o.KubeconfigDir)
				}
				if m, _ := modeOf(k.path); m != k.mode {
					t.Errorf("%s: mode %#o, want %#o", k.path, m, k.mode)
				}
				cfg, err := clientcmd.LoadFromFile(k.path)
				if err != nil {
					t.Fatal(err)
				}
				rc, err := clientcmd.NewDefaultClientConfig(*cfg, nil).ClientConfig()
				if err != nil {
					t.Fatalf("%s: %v", k.path, err)
				}
				if want := "https://127.0.0.1:" + strconv.Itoa(tc.port); rc.Host != want {
					t.Errorf("%s: server %q, want %q", k.path, rc.Host, want)
				}
				certPEM, _ := os.ReadFile(k.kp.Cert)
				keyPEM, _ := os.ReadFile(k.kp.Key)
				if k.path == p.AdminKubeconfig {
					if !bytes.Equal(rc.CAData, caPEM) || !bytes.Equal(rc.CertData, certPEM) || !bytes.Equal(rc.KeyData, keyPEM) {
						t.Errorf("%s: embedded CA/cert/key differ from the files", k.path)
					}
				} else if rc.CAFile != p.ServerCA.Cert || rc.CertFile != k.kp.Cert || rc.KeyFile != k.kp.Key || len(rc.CertData) != 0 {
					// Files, so that client-go reloads renewed certificates.
					t.Errorf("%s: CA %q cert %q key %q, want references to the files", k.path, rc.CAFile, rc.CertFile, rc.KeyFile)
				}
				if _, ok := cfg.AuthInfos[k.user]; !ok {
					t.Errorf("%s: no user %q", k.path, k.user)
				}
			}
		})
	}
}

func TestWriteKubeconfig(t *testing.T) {
	o := testOptions(t)
	p := mustEnsure(t, o)
	path := filepath.Join(t.TempDir(), "extra.kubeconfig")
	write := func(server string) {
		t.Helper()
		if err := WriteKubeconfig(path, server, p.ServerCA.Cert, p.Admin.Cert, p.Admin.Key, "admin", 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("https://127.0.0.1:6443")
	fi1, _ := os.Stat(path)
	write("https://127.0.0.1:6443")
	fi2, _ := os.Stat(path)
	if !os.SameFile(fi1, fi2) || !fi1.ModTime().Equal(fi2.ModTime()) {
		t.Errorf("unchanged kubeconfig was rewritten")
	}
	write("https://10.0.0.5:6443")
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Clusters[cfg.Contexts[cfg.CurrentContext].Cluster].Server; got != "https://10.0.0.5:6443" {
		t.Errorf("server %q", got)
	}
	err = WriteKubeconfig(path, "https://x", p.ServerCA.Cert, p.Admin.Cert, p.Scheduler.Key, "admin", 0o600)
	wantErrContains(t, err, p.Scheduler.Key+" does not match "+p.Admin.Cert)
}
