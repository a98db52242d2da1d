// Command incluster is the tests' in-cluster client: run in a pod, it builds
// client-go's in-cluster configuration (the service-account token and the
// kubernetes Service's address from the environment) and lists namespaces,
// printing one name a line. Tests put it in the busybox image
// (testimage.Image.Files) to check that a pod reaches the API servers
// through the kubernetes Service.
//
// `incluster lookup NAME` resolves NAME with Go's resolver, which reads the
// pod's /etc/resolv.conf as a glibc pod's would (search list, ndots), and
// prints one address a line: busybox's static nslookup (1.35) applies no
// search list, and its static wget resolves nothing.
package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

func main() {
	if len(os.Args) == 3 && os.Args[1] == "lookup" {
		if err := lookup(os.Args[2]); err != nil {
			fmt.Fprintln(os.Stderr, "incluster:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "incluster:", err)
		os.Exit(1)
	}
}

func run() error {
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return err
	}
	cfg.Timeout = 10 * time.Second
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	list, err := client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list namespaces through %s: %w", cfg.Host, err)
	}
	for _, ns := range list.Items {
		fmt.Println(ns.Name)
	}
	return nil
}

func lookup(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupHost(ctx, name)
	if err != nil {
		return err
	}
	for _, a := range addrs {
		fmt.Println(a)
	}
	return nil
}
