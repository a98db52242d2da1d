package bootstrap

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/edgeplane/edgeplane/pkg/controllers"
	"github.com/edgeplane/edgeplane/pkg/datastore"
	"github.com/edgeplane/edgeplane/pkg/manifests"
	"github.com/edgeplane/edgeplane/pkg/node"
	"github.com/edgeplane/edgeplane/pkg/nodeconfig"
	"github.com/edgeplane/edgeplane/pkg/preflight"
)

// Datastore kinds the server can run.
var datastores = []string{"sqlite", "etcd"}

// Options are the flags of `edgeplane server`.
type Options struct {
	DataDir             string
	Datastore           string
	SQLiteSynchronous   string
	SQLiteCommitWindow  time.Duration
	BindAddress         string
	HTTPSPort           int
	AdvertiseAddress    string
	TLSSANs             []string
	ServiceCIDR         string
	ClusterDomain       string
	CoreDNSImage        string
	WriteKubeconfig     string
	WriteKubeconfigMode string
	CompactionInterval  time.Duration
	NodeHeartbeat       time.Duration
	Disable             []string
	ClusterCIDR         string
	AllocateNodeCIDRs   bool
	Profile             string
	MaxConnections      int
	AllowPrivileged     bool
	Day2                Day2Options
	Cluster             ClusterOptions
	Node                node.Options
	Network             NetworkOptions
	LocalStorage        localStorageOptions
}

// NewOptions returns the defaults.
func NewOptions() *Options {
	return &Options{
		DataDir:             defaultDataDir(),
		Datastore:           "sqlite",
		SQLiteSynchronous:   datastore.SyncFull,
		SQLiteCommitWindow:  datastore.DefaultCommitWindow,
		BindAddress:         "0.0.0.0",
		HTTPSPort:           6443,
		ServiceCIDR:         "10.43.0.0/16",
		ClusterDomain:       "cluster.local",
		CoreDNSImage:        manifests.DefaultCoreDNSImage,
		WriteKubeconfigMode: "0600",
		CompactionInterval:  5 * time.Minute,
		NodeHeartbeat:       nodeconfig.DefaultHeartbeat,
		ClusterCIDR:         controllers.DefaultClusterCIDR,
		AllocateNodeCIDRs:   true,
		Profile:             ProfileAuto,
		AllowPrivileged:     true,
		Day2:                newDay2Options(),
		Cluster:             newClusterOptions(),
		Node:                node.NewOptions(),
		Network:             newNetworkOptions(),
	}
}

// defaultDataDir is /var/lib/edgeplane for root, $HOME/.edgeplane otherwise.
func defaultDataDir() string {
	if os.Geteuid() == 0 {
		return "/var/lib/edgeplane"
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".edgeplane")
	}
	return ".edgeplane"
}

// AddFlags binds the options to fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.DataDir, "data-dir", o.DataDir, "Directory for certificates, kubeconfigs and the datastore (created 0700).")
	fs.StringVar(&o.Datastore, "datastore", o.Datastore, "Datastore: "+strings.Join(datastores, " or ")+".")
	fs.StringVar(&o.SQLiteSynchronous, "sqlite-synchronous", o.SQLiteSynchronous, "How SQLite syncs commits: "+datastore.SyncFull+" puts every write on the disk before it is acknowledged (a power cut loses nothing acknowledged); "+datastore.SyncNormal+" is faster and writes less but a power cut may lose the last acknowledged writes (see docs/reliability/powercut.md). SQLite only.")
	fs.DurationVar(&o.SQLiteCommitWindow, "sqlite-commit-window", o.SQLiteCommitWindow, "How long a Lease write (a node's heartbeat) may wait on SQLite for other writes to share its commit and fsync: fewer bytes written to the disk for a little Lease latency; every write is still on the disk before it is acknowledged. 0 waits for none. SQLite only.")
	fs.StringVar(&o.BindAddress, "bind-address", o.BindAddress, "IP address the HTTPS API listens on.")
	fs.IntVar(&o.HTTPSPort, "https-port", o.HTTPSPort, "Port of the HTTPS API (0 picks a free port).")
	fs.StringVar(&o.AdvertiseAddress, "advertise-address", o.AdvertiseAddress, "IP address advertised to the cluster in the kubernetes Service endpoints (default: the host's primary address).")
	fs.StringSliceVar(&o.TLSSANs, "tls-san", o.TLSSANs, "Extra IP address or DNS name for the serving certificate (repeatable).")
	fs.StringVar(&o.ServiceCIDR, "service-cidr", o.ServiceCIDR, "CIDR that Service cluster IPs are allocated from.")
	fs.StringVar(&o.ClusterDomain, "cluster-domain", o.ClusterDomain, "Cluster DNS domain.")
	fs.StringVar(&o.CoreDNSImage, "coredns-image", o.CoreDNSImage, "CoreDNS image of the packaged DNS manifest (pulled if not present; an image in the airgap images directory is used as is).")
	fs.StringVar(&o.WriteKubeconfig, "write-kubeconfig", o.WriteKubeconfig, "Also write the admin kubeconfig to this path.")
	fs.StringVar(&o.WriteKubeconfigMode, "write-kubeconfig-mode", o.WriteKubeconfigMode, "File mode (octal) of the admin kubeconfig files.")
	fs.DurationVar(&o.CompactionInterval, "compaction-interval", o.CompactionInterval, "How often the API server compacts old revisions in the datastore (0 turns it off; see docs/FLASH.md).")
	fs.DurationVar(&o.NodeHeartbeat, "node-heartbeat", o.NodeHeartbeat, "How often every node renews its Lease; a node is NotReady after five missed renewals (50 s at upstream's 10 s). Longer writes less on many nodes and flaky links, and notices a dead node later (docs/NODES.md).")
	fs.StringSliceVar(&o.Disable, "disable", o.Disable, "Components not to run, comma-separated (repeatable): "+strings.Join(disableable(false), ", ")+".")
	fs.StringVar(&o.ClusterCIDR, "cluster-cidr", o.ClusterCIDR, "Pod network: one CIDR, or an IPv4 and an IPv6 CIDR separated by a comma.")
	fs.BoolVar(&o.AllocateNodeCIDRs, "allocate-node-cidrs", o.AllocateNodeCIDRs, "Give each Node a pod CIDR from --cluster-cidr (nodes need one for the pod network).")
	fs.IntVar(&o.MaxConnections, "max-connections", o.MaxConnections, fmt.Sprintf("Most open connections to the API port; new ones are closed at once while this many are open (0: the profile's, %d default, %d small).", defaultMaxConnections, smallMaxConnections))
	fs.StringVar(&o.Profile, "profile", o.Profile, "Resource profile: "+strings.Join(profiles, ", ")+". small is for 512 MB-1 GB boards (less memory; no OpenAPI v2 document); auto picks small on hosts with 1.5 GiB of memory or less.")
	fs.BoolVar(&o.AllowPrivileged, "allow-privileged", o.AllowPrivileged, "Run pods with privileged containers (CNI, device plugins, access to GPIO or USB), as k3s and kubeadm do; false refuses them in the API server and in the kubelet of every edgeplane node (static pods). Pod Security admission restricts them per namespace: label it pod-security.kubernetes.io/enforce=baseline (docs/NODES.md).")
	o.Day2.AddFlags(fs)
	o.Cluster.AddFlags(fs)
	o.Node.AddFlags(fs)
	o.Network.AddFlags(fs)
	o.LocalStorage.AddFlags(fs)
}

// completedOptions holds defaulted and parsed options. It is private so that
// only Complete can make one.
type completedOptions struct {
	DataDir           string
	Datastore         string
	SQLiteSynchronous string
	// SQLiteCommitWindow: see datastore.Options.SQLiteCommitWindow.
	SQLiteCommitWindow time.Duration
	BindAddress        net.IP
	HTTPSPort          int
	AdvertiseAddress   net.IP
	Hostname           string
	TLSSANs            []string
	ServiceCIDR        *net.IPNet
	// ClusterDNS is the cluster DNS Service's address, the tenth of the
	// service CIDR: the kube-dns Service's ClusterIP and every kubelet's
	// clusterDNS.
	ClusterDNS         net.IP
	ClusterDomain      string
	CoreDNSImage       string
	WriteKubeconfig    string
	KubeconfigMode     os.FileMode
	CompactionInterval time.Duration
	// NodeHeartbeat is --node-heartbeat: nodeconfig derives the kubelets'
	// Lease and the node lifecycle controller's grace period from it.
	NodeHeartbeat time.Duration
	// Disabled holds the components --disable turned off.
	Disabled          map[string]bool
	ClusterCIDR       string
	AllocateNodeCIDRs bool
	// AllowPrivileged is --allow-privileged: the API server's and every
	// node's kubelet's (nodeconfig tells agents).
	AllowPrivileged bool
	// Profile holds the resolved --profile's settings.
	Profile profile
	// HostMemory is the memory this process may use (0: unknown), read once
	// for the profile and the Go runtime's limit.
	HostMemory uint64
	Day2       day2Completed
	Cluster    clusterCompleted
	// Node is this server's own node, when a container runtime is there.
	Node node.Settings
	// Network is the cluster network every node runs.
	Network node.Network
	// Endpoint says how the advertise address relates to this host
	// (apiendpoint.go).
	Endpoint apiEndpoint
	// LocalStoragePath is --default-local-storage-path, resolved
	// (localstorage.go).
	LocalStoragePath string

	// problems found while parsing, reported by Validate with the rest.
	problems []error
}

// CompletedOptions are Options after Complete; Validate them before use.
type CompletedOptions struct {
	*completedOptions
}

// Complete fills in defaults and parses values. Parse problems are kept for
// Validate so that every problem is reported at once.
func (o *Options) Complete() (CompletedOptions, error) {
	c := &completedOptions{
		Datastore:          o.Datastore,
		SQLiteSynchronous:  strings.ToLower(strings.TrimSpace(o.SQLiteSynchronous)),
		SQLiteCommitWindow: o.SQLiteCommitWindow,
		HTTPSPort:          o.HTTPSPort,
		ClusterDomain:      o.ClusterDomain,
		CoreDNSImage:       strings.TrimSpace(o.CoreDNSImage),
		WriteKubeconfig:    o.WriteKubeconfig,

		ClusterCIDR:       strings.TrimSpace(o.ClusterCIDR),
		AllocateNodeCIDRs: o.AllocateNodeCIDRs,
		AllowPrivileged:   o.AllowPrivileged,
	}
	bad := func(format string, args ...any) { c.problems = append(c.problems, fmt.Errorf(format, args...)) }

	if o.DataDir == "" {
		bad("--data-dir must not be empty")
	} else if abs, err := filepath.Abs(o.DataDir); err != nil {
		bad("--data-dir %q: %v", o.DataDir, err)
	} else {
		c.DataDir = abs
	}
	if c.BindAddress = net.ParseIP(o.BindAddress); c.BindAddress == nil {
		bad("--bind-address %q is not an IP address", o.BindAddress)
	}
	hostname, err := os.Hostname()
	if err != nil {
		return CompletedOptions{}, fmt.Errorf("read the hostname: %w", err)
	}
	c.Hostname = strings.ToLower(hostname)
	var nodeErrs []error
	c.Node, nodeErrs = o.Node.Complete(c.Hostname)
	c.problems = append(c.problems, nodeErrs...)

	switch {
	case o.AdvertiseAddress != "":
		if c.AdvertiseAddress = net.ParseIP(o.AdvertiseAddress); c.AdvertiseAddress == nil {
			bad("--advertise-address %q is not an IP address", o.AdvertiseAddress)
		}
	case c.BindAddress != nil && !c.BindAddress.IsUnspecified() && !c.BindAddress.IsLoopback():
		c.AdvertiseAddress = c.BindAddress
	default:
		// As upstream: the address of the interface that holds the default route.
		ip, err := utilnet.ChooseHostInterface()
		if err != nil {
			bad("no --advertise-address given and no host address found (%v): pass --advertise-address", err)
		}
		c.AdvertiseAddress = ip
	}
	if c.Endpoint.explicit = o.AdvertiseAddress != ""; c.Endpoint.explicit && c.AdvertiseAddress != nil {
		host, err := hostAddresses()
		if err != nil {
			bad("--advertise-address %s: listing this host's addresses: %v", c.AdvertiseAddress, err)
		}
		c.Endpoint.local = isHostAddress(c.AdvertiseAddress, host)
	}
	for _, san := range o.TLSSANs {
		if san = strings.TrimSpace(san); san != "" {
			c.TLSSANs = append(c.TLSSANs, san)
		}
	}
	if _, cidr, err := net.ParseCIDR(o.ServiceCIDR); err != nil {
		bad("--service-cidr %q is not a CIDR: %v", o.ServiceCIDR, err)
	} else {
		c.ServiceCIDR = cidr
		if c.ClusterDNS, err = manifests.DNSServiceIP(cidr); err != nil {
			c.problems = append(c.problems, err)
		}
	}
	c.HostMemory = preflight.HostMemory()
	if name, err := ResolveProfile(o.Profile, c.HostMemory); err != nil {
		c.problems = append(c.problems, err)
	} else {
		c.Profile = profileSettings(name)
	}
	switch {
	case o.MaxConnections < 0:
		bad("--max-connections %d must not be negative", o.MaxConnections)
	case o.MaxConnections > 0:
		c.Profile.MaxConnections = o.MaxConnections
	}
	var disableErrs []error
	c.Disabled, disableErrs = parseDisable(false, o.Disable)
	var storageErrs []error
	c.LocalStoragePath, storageErrs = o.LocalStorage.complete(c.DataDir)
	c.problems = append(c.problems, storageErrs...)
	var day2Errs []error
	c.Day2, day2Errs = o.Day2.complete()
	c.problems = append(c.problems, day2Errs...)
	c.problems = append(c.problems, disableErrs...)
	var netErrs []error
	c.Network, netErrs = o.Network.complete(c.Disabled, c.ClusterCIDR)
	c.problems = append(c.problems, netErrs...)
	var clusterErrs []error
	c.Cluster, clusterErrs = o.Cluster.complete()
	c.problems = append(c.problems, clusterErrs...)
	if c.Cluster.etcdCluster() {
		c.Datastore = "etcd" // an embedded etcd cluster (etcdjoin.go)
	}
	if c.CompactionInterval = o.CompactionInterval; c.CompactionInterval < 0 {
		bad("--compaction-interval %s must not be negative", o.CompactionInterval)
	}
	c.NodeHeartbeat = o.NodeHeartbeat
	if err := nodeconfig.ValidateHeartbeat(o.NodeHeartbeat); err != nil {
		c.problems = append(c.problems, err)
	}
	if mode, err := strconv.ParseUint(o.WriteKubeconfigMode, 8, 32); err != nil || mode > 0o777 {
		bad("--write-kubeconfig-mode %q is not an octal file mode such as 0600", o.WriteKubeconfigMode)
	} else {
		c.KubeconfigMode = os.FileMode(mode)
	}
	return CompletedOptions{c}, nil
}

// Validate returns every problem with the options.
func (c CompletedOptions) Validate() []error {
	errs := slices.Clone(c.problems)
	if !slices.Contains(datastores, c.Datastore) {
		errs = append(errs, fmt.Errorf("--datastore %q is not one of: %s", c.Datastore, strings.Join(datastores, ", ")))
	}
	errs = append(errs, c.validateSQLiteSynchronous()...)
	errs = append(errs, (&datastore.Options{DataDir: "unused", SQLiteCommitWindow: c.SQLiteCommitWindow}).Validate()...)
	if c.HTTPSPort < 0 || c.HTTPSPort > 65535 {
		errs = append(errs, fmt.Errorf("--https-port %d is not between 0 and 65535", c.HTTPSPort))
	}
	if ip := c.AdvertiseAddress; ip != nil && (ip.IsLoopback() || ip.IsUnspecified()) {
		errs = append(errs, fmt.Errorf("--advertise-address %s: Endpoints may not hold loopback or unspecified addresses; use the host's own address", ip))
	}
	if err := c.validateEndpoint(); err != nil {
		errs = append(errs, err)
	}
	for _, san := range c.TLSSANs {
		if net.ParseIP(san) != nil {
			continue
		}
		name := strings.TrimPrefix(san, "*.")
		msgs := validation.IsDNS1123Subdomain(name)
		for _, label := range strings.Split(name, ".") {
			if len(msgs) == 0 && len(label) > validation.DNS1123LabelMaxLength {
				// as pkg/certs and x509 require
				msgs = append(msgs, validation.MaxLenError(validation.DNS1123LabelMaxLength))
			}
		}
		if len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("--tls-san %q is neither an IP address nor a DNS name: %s", san, strings.Join(msgs, "; ")))
		}
	}
	if c.CoreDNSImage == "" && !c.Disabled[componentCoreDNS] {
		errs = append(errs, errors.New("--coredns-image must not be empty (or pass --disable=coredns)"))
	}
	if msgs := validation.IsDNS1123Subdomain(c.ClusterDomain); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--cluster-domain %q: %s", c.ClusterDomain, strings.Join(msgs, "; ")))
	}
	if cidr := c.ServiceCIDR; cidr != nil {
		ones, bits := cidr.Mask.Size()
		if bits-ones < 2 {
			errs = append(errs, fmt.Errorf("--service-cidr %s is too small to hold Services", cidr))
		}
	}
	errs = append(errs, controllers.ValidateClusterCIDR(c.ClusterCIDR, c.ServiceCIDR, c.AllocateNodeCIDRs)...)
	if c.WriteKubeconfig != "" && c.DataDir != "" && filepath.Clean(c.WriteKubeconfig) == filepath.Join(c.DataDir, adminKubeconfigName) {
		errs = append(errs, errors.New("--write-kubeconfig must differ from the admin kubeconfig in --data-dir"))
	}
	return errs
}

// validateSQLiteSynchronous checks --sqlite-synchronous, and that the fast
// mode is asked of SQLite only (elsewhere it would silently change nothing).
func (c CompletedOptions) validateSQLiteSynchronous() []error {
	switch c.SQLiteSynchronous {
	case datastore.SyncFull:
		return nil
	case datastore.SyncNormal:
	default:
		return []error{fmt.Errorf("--sqlite-synchronous %q is not one of: %s (the default: a power cut loses nothing acknowledged), %s (faster, but a power cut may lose the last acknowledged writes)",
			c.SQLiteSynchronous, datastore.SyncFull, datastore.SyncNormal)}
	}
	kind := c.Datastore
	if ep := c.Cluster.DatastoreEndpoint; ep != "" {
		kind, _, _ = datastore.EndpointKind(ep) // a bad endpoint is reported on its own
	}
	if kind != datastore.TypeSQLite {
		return []error{fmt.Errorf("--sqlite-synchronous %s applies to SQLite only, and the datastore is %s: remove it", c.SQLiteSynchronous, kind)}
	}
	return nil
}
