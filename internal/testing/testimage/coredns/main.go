// Command coredns is a CoreDNS server for edgeplane's tests, built from the
// github.com/coredns/coredns module with only the plugins the packaged
// Corefile uses, so the binary stays small and builds fast. It lives in its
// own Go module so that edgeplane's go.mod does not take CoreDNS's
// dependency tree. internal/testing/testimage builds it and wraps it in an image.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	// The plugins of the packaged Corefile (pkg/manifests), plus log.
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

// directives is the order in which the plugins handle a query; it follows
// CoreDNS's own plugin.cfg order for the plugins linked in.
var directives = []string{
	"reload",
	"ready",
	"health",
	"errors",
	"log",
	"loadbalance",
	"cache",
	"kubernetes",
	"loop",
	"forward",
}

func main() {
	dnsserver.Directives = directives
	coremain.Run()
}
