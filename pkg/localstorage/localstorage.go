// Package localstorage gives PersistentVolumeClaims volumes in a directory
// on the node where their pod runs, with no helper pods and no extra image:
// the default StorageClass local-path (the name k3s users' charts use),
// provisioner edgeplane.io/local-path, volumeBindingMode
// WaitForFirstConsumer, reclaim Delete.
//
// It is split the way the work is: what needs the API runs in the server,
// what needs the node's disk runs on the node.
//
//	Provisioner (server)  a claim of the class whose pod the scheduler has
//	                      placed (volume.kubernetes.io/selected-node) gets a
//	                      PersistentVolume pvc-<claim UID>: a local volume
//	                      at <path>/pvc-<uid>_<namespace>_<claim> with node
//	                      affinity to that node, pre-bound to the claim, the
//	                      node's label NodeLabel and the finalizer
//	                      Finalizer. A Released volume of reclaim Delete is
//	                      deleted; the finalizer holds it until its node has
//	                      removed the directory.
//	Node (every node)     makes the directory of each of its volumes (mode
//	                      0777, as k3s's local-path-provisioner does, so that
//	                      non-root pods can write; fsGroup is applied by the
//	                      kubelet), reports a path it cannot write or a disk
//	                      without room for the claim as an event on the
//	                      claim, and removes the directory of a volume being
//	                      deleted, then its finalizer.
//
// A node may not create PersistentVolumes (NodeRestriction and the Node
// authorizer see to that), and needs little: it reads the PersistentVolumes
// (the role NodeRoleName) and may patch one only to remove Finalizer from a
// volume of its own that is being deleted (the ValidatingAdmissionPolicy
// PolicyName). Its events go through the node's own event rights.
package localstorage

import (
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
)

const (
	// ComponentName is the part's name, in the server and on the nodes,
	// and its --disable name (k3s's).
	ComponentName = "local-storage"
	// ClassName is the StorageClass (k3s's name).
	ClassName = "local-path"
	// ProvisionerName is the class's provisioner and the volumes'
	// pv.kubernetes.io/provisioned-by.
	ProvisionerName = "edgeplane.io/local-path"
	// NodeLabel on a volume names the node its directory is on: the node
	// watches its own volumes by it.
	NodeLabel = "edgeplane.io/local-storage-node"
	// Finalizer keeps a volume until its node has removed its directory.
	Finalizer = "edgeplane.io/local-storage"

	// annProvisionedBy is the provisioner of a dynamically provisioned
	// volume (upstream's annotation).
	annProvisionedBy = "pv.kubernetes.io/provisioned-by"
	// annSelectedNode is the node the scheduler chose for a claim's first
	// consumer (upstream's annotation).
	annSelectedNode = "volume.kubernetes.io/selected-node"
	// annDefaultClass marks the default StorageClass.
	annDefaultClass = "storageclass.kubernetes.io/is-default-class"
	// hostnameLabel is the node label the volumes' node affinity matches.
	hostnameLabel = corev1.LabelHostname
	// nodeUserPrefix is the user name prefix of node credentials.
	nodeUserPrefix = "system:node:"
	// fieldManager owns what the server applies.
	fieldManager = "edgeplane"
)

// managedBy labels the objects the server makes.
var managedBy = map[string]string{"app.kubernetes.io/managed-by": "edgeplane"}

// VolumeName is the volume of the claim with uid (the name upstream's
// external provisioners give).
func VolumeName(claimUID string) string { return "pvc-" + claimUID }

// DirName is the volume's directory name under the storage path:
// <volume>_<namespace>_<claim>, as k3s's local-path-provisioner names it.
func DirName(volume, namespace, claim string) string {
	return volume + "_" + namespace + "_" + claim
}

// ours reports whether pv is a volume of this provisioner.
func ours(pv *corev1.PersistentVolume) bool {
	return pv.Annotations[annProvisionedBy] == ProvisionerName && pv.Labels[NodeLabel] != ""
}

// volumeDir is pv's directory when it has the shape this package gives
// it: a local volume whose path ends in DirName of its own name and claim.
// Anything else (a volume edited by hand, or not ours) is never created or
// removed by a node.
func volumeDir(pv *corev1.PersistentVolume) (string, bool) {
	if pv.Spec.Local == nil || pv.Spec.ClaimRef == nil {
		return "", false
	}
	path := pv.Spec.Local.Path
	want := DirName(pv.Name, pv.Spec.ClaimRef.Namespace, pv.Spec.ClaimRef.Name)
	if !filepath.IsAbs(path) || filepath.Clean(path) != path || filepath.Base(path) != want {
		return "", false
	}
	return path, true
}
