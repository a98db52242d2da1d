package localstorage

import (
	"errors"
	"fmt"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// checkClaim says why a claim cannot get a local-path volume; nil when it
// can. These are the claim's own choices: the claim has to change.
func checkClaim(pvc *corev1.PersistentVolumeClaim) error {
	var errs []error
	if pvc.Spec.Selector != nil {
		errs = append(errs, errors.New("a claim with a selector binds existing volumes only: remove spec.selector"))
	}
	for _, m := range pvc.Spec.AccessModes {
		if m != corev1.ReadWriteOnce && m != corev1.ReadWriteOncePod {
			errs = append(errs, fmt.Errorf("access mode %s is not supported: a directory on one node is ReadWriteOnce or ReadWriteOncePod", m))
		}
	}
	if pvc.Spec.VolumeMode != nil && *pvc.Spec.VolumeMode == corev1.PersistentVolumeBlock {
		errs = append(errs, errors.New("volumeMode Block is not supported: a local-path volume is a directory (volumeMode Filesystem)"))
	}
	if pvc.Spec.DataSource != nil || pvc.Spec.DataSourceRef != nil {
		errs = append(errs, errors.New("a data source (clone, snapshot) is not supported: remove spec.dataSource"))
	}
	if _, ok := pvc.Spec.Resources.Requests[corev1.ResourceStorage]; !ok {
		errs = append(errs, errors.New("no storage request (spec.resources.requests.storage)"))
	}
	return errors.Join(errs...)
}

// newVolume is the volume of pvc, of class, in a directory under root on
// node.
func newVolume(pvc *corev1.PersistentVolumeClaim, class *storagev1.StorageClass, node *corev1.Node, root string) *corev1.PersistentVolume {
	name := VolumeName(string(pvc.UID))
	hostname := node.Labels[hostnameLabel]
	if hostname == "" {
		hostname = node.Name
	}
	reclaim := corev1.PersistentVolumeReclaimDelete
	if class.ReclaimPolicy != nil {
		reclaim = *class.ReclaimPolicy
	}
	mode := corev1.PersistentVolumeFilesystem
	labels := map[string]string{NodeLabel: node.Name}
	for k, v := range managedBy {
		labels[k] = v
	}
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Labels:      labels,
			Annotations: map[string]string{annProvisionedBy: ProvisionerName},
			Finalizers:  []string{Finalizer},
		},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:    corev1.ResourceList{corev1.ResourceStorage: pvc.Spec.Resources.Requests[corev1.ResourceStorage]},
			AccessModes: pvc.Spec.AccessModes,
			ClaimRef: &corev1.ObjectReference{
				Kind: "PersistentVolumeClaim", APIVersion: "v1",
				Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID,
			},
			PersistentVolumeReclaimPolicy: reclaim,
			StorageClassName:              class.Name,
			MountOptions:                  class.MountOptions,
			VolumeMode:                    &mode,
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				Local: &corev1.LocalVolumeSource{Path: filepath.Join(root, DirName(name, pvc.Namespace, pvc.Name))},
			},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
					Key: hostnameLabel, Operator: corev1.NodeSelectorOpIn, Values: []string{hostname},
				}}}},
			}},
		},
	}
}
