package bootstrap

// DefaultDataDir is the data dir `edgeplane server` uses without --data-dir:
// /var/lib/edgeplane for root, $HOME/.edgeplane otherwise.
func DefaultDataDir() string { return defaultDataDir() }

// AdminKubeconfigName is the admin kubeconfig's file name in the data dir.
const AdminKubeconfigName = adminKubeconfigName
