package manifests

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"math/big"
	"net"
	"regexp"
	"strings"
)

// Names of the packaged manifests, as --disable takes them. Each is the file
// <name>.yaml in the manifests directory.
const (
	CoreDNS = "coredns"
)

// DefaultCoreDNSImage is the CoreDNS image the packaged manifest runs unless
// --coredns-image says otherwise.
const DefaultCoreDNSImage = "docker.io/coredns/coredns:1.15.0"

//go:embed packaged/*.yaml
var packagedFS embed.FS

// Values fill the packaged manifests' templates.
type Values struct {
	// ClusterDNS is the kube-dns Service's ClusterIP (DNSServiceIP).
	ClusterDNS net.IP
	// ClusterDomain is the cluster's DNS domain, e.g. cluster.local.
	ClusterDomain string
	// CoreDNSImage is the CoreDNS image reference.
	CoreDNSImage string
}

// Validate reports every value missing.
func (v Values) Validate() []error {
	var errs []error
	if v.ClusterDNS == nil {
		errs = append(errs, errors.New("manifests: no cluster DNS address"))
	}
	if v.ClusterDomain == "" {
		errs = append(errs, errors.New("manifests: no cluster domain"))
	}
	if strings.TrimSpace(v.CoreDNSImage) == "" {
		errs = append(errs, errors.New("--coredns-image must not be empty"))
	}
	return errs
}

// Packaged returns the packaged manifests rendered with v, by name.
func Packaged(v Values) (map[string][]byte, error) {
	if errs := v.Validate(); len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	entries, err := packagedFS.ReadDir("packaged")
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	for _, e := range entries {
		raw, err := packagedFS.ReadFile("packaged/" + e.Name())
		if err != nil {
			return nil, err
		}
		rendered, err := render(raw, v.fields())
		if err != nil {
			return nil, fmt.Errorf("packaged manifest %s: %w", e.Name(), err)
		}
		out[strings.TrimSuffix(e.Name(), ".yaml")] = rendered
	}
	return out, nil
}

// fields are the values a packaged manifest may name, as {{ .Name }}.
func (v Values) fields() map[string]string {
	return map[string]string{
		"ClusterDNS":    v.ClusterDNS.String(),
		"ClusterDomain": v.ClusterDomain,
		"CoreDNSImage":  v.CoreDNSImage,
	}
}

// placeholder is the one template form the packaged manifests use.
var placeholder = regexp.MustCompile(`\{\{\s*\.([A-Za-z][A-Za-z0-9]*)\s*\}\}`)

// render replaces every {{ .Name }} in raw with fields[Name]. It is not
// text/template on purpose: text/template's method lookup by name makes the
// Go linker keep every exported method of every type in the binary
// (docs/PERFORMANCE.md, "Binary size"). A name that fields lack and any other
// {{ ... }} are errors, as text/template's missingkey=error made them.
func render(raw []byte, fields map[string]string) ([]byte, error) {
	var missing []string
	out := placeholder.ReplaceAllFunc(raw, func(m []byte) []byte {
		name := string(placeholder.FindSubmatch(m)[1])
		val, ok := fields[name]
		if !ok {
			missing = append(missing, name)
		}
		return []byte(val)
	})
	if len(missing) > 0 {
		return nil, fmt.Errorf("no value for %s", strings.Join(missing, ", "))
	}
	if i := bytes.Index(out, []byte("{{")); i >= 0 {
		line := bytes.Count(out[:i], []byte("\n")) + 1
		return nil, fmt.Errorf("line %d: only {{ .Name }} placeholders are supported", line)
	}
	return out, nil
}

// Names are the names of the packaged manifests.
func Names() []string {
	entries, _ := packagedFS.ReadDir("packaged")
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), ".yaml"))
	}
	return names
}

// DNSServiceIP is the cluster DNS Service's address: the tenth address of
// the service CIDR (10.43.0.10 for 10.43.0.0/16), as k3s and kubeadm
// choose it.
func DNSServiceIP(serviceCIDR *net.IPNet) (net.IP, error) {
	if serviceCIDR == nil {
		return nil, errors.New("no service CIDR")
	}
	ones, bits := serviceCIDR.Mask.Size()
	if bits-ones < 4 { // fewer than 16 addresses: no room for .10 and the network/broadcast
		return nil, fmt.Errorf("--service-cidr %s is too small for the cluster DNS address (its tenth address): use a /28 or larger", serviceCIDR)
	}
	base := serviceCIDR.IP.Mask(serviceCIDR.Mask)
	n := new(big.Int).SetBytes(base)
	n.Add(n, big.NewInt(10))
	b := n.Bytes()
	ip := make(net.IP, len(base))
	copy(ip[len(ip)-len(b):], b)
	if len(ip) == net.IPv6len {
		return ip, nil
	}
	return ip.To4(), nil
}
