package localstorage

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// Ensure makes what the server keeps for the part: the nodes' access
// (EnsureAccess), the class, and the finalizer on every volume of ours
// (one that a --disable took off, or a volume made before). The class is
// made only when there is none named ClassName, and marked default only
// when no other class is: an existing class, the user's or edited by the
// user, is left as it is.
func Ensure(ctx context.Context, client kubernetes.Interface) error {
	if err := EnsureAccess(ctx, client); err != nil {
		return err
	}
	if err := ensureClass(ctx, client); err != nil {
		return err
	}
	return setFinalizers(ctx, client, true)
}

// Disable undoes Ensure and leaves the volumes working: the class goes
// (when it is this provisioner's), and so do the nodes' access and the
// finalizer on the volumes, so that a volume deleted while the part is off
// is not held for a node that no longer removes its directory. Volumes,
// their claims and their directories stay.
func Disable(ctx context.Context, client kubernetes.Interface) error {
	logger := klog.FromContext(ctx)
	class, err := client.StorageV1().StorageClasses().Get(ctx, ClassName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return fmt.Errorf("StorageClass %s: %w", ClassName, err)
	case class.Provisioner != ProvisionerName:
		logger.Info("Local storage is disabled; the StorageClass of that name is not edgeplane's and stays", "storageClass", ClassName, "provisioner", class.Provisioner)
	default:
		err := client.StorageV1().StorageClasses().Delete(ctx, ClassName, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &class.UID}})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("StorageClass %s: %w", ClassName, err)
		}
		logger.Info("Local storage is disabled: removed the StorageClass; existing volumes keep working", "storageClass", ClassName)
	}
	if err := setFinalizers(ctx, client, false); err != nil {
		return err
	}
	return removeAccess(ctx, client)
}

// ensureClass creates the class unless a class of that name exists.
func ensureClass(ctx context.Context, client kubernetes.Interface) error {
	logger := klog.FromContext(ctx)
	classes, err := client.StorageV1().StorageClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing StorageClasses: %w", err)
	}
	var otherDefault string
	for _, c := range classes.Items {
		if c.Name == ClassName {
			if c.Provisioner != ProvisionerName {
				logger.Info("A StorageClass named "+ClassName+" exists with another provisioner: it is left alone, and edgeplane provisions no volumes for it",
					"provisioner", c.Provisioner)
			}
			return nil
		}
		if c.Annotations[annDefaultClass] == "true" {
			otherDefault = c.Name
		}
	}
	class := NewClass()
	if otherDefault != "" {
		delete(class.Annotations, annDefaultClass)
		logger.Info("StorageClass "+ClassName+" is not made the default: another class is", "default", otherDefault)
	}
	if _, err := client.StorageV1().StorageClasses().Create(ctx, class, metav1.CreateOptions{FieldManager: fieldManager}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("StorageClass %s: %w", ClassName, err)
	}
	return nil
}

// NewClass is the StorageClass as the server makes it.
func NewClass() *storagev1.StorageClass {
	reclaim := corev1.PersistentVolumeReclaimDelete
	binding := storagev1.VolumeBindingWaitForFirstConsumer
	return &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{
			Name:        ClassName,
			Labels:      managedBy,
			Annotations: map[string]string{annDefaultClass: "true"},
		},
		Provisioner:       ProvisionerName,
		ReclaimPolicy:     &reclaim,
		VolumeBindingMode: &binding,
	}
}

// setFinalizers puts Finalizer on every volume of ours that is not being
// deleted (on), or takes it off every volume (off).
func setFinalizers(ctx context.Context, client kubernetes.Interface, on bool) error {
	pvs, err := client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{LabelSelector: NodeLabel})
	if err != nil {
		return fmt.Errorf("listing the local-path PersistentVolumes: %w", err)
	}
	for i := range pvs.Items {
		pv := &pvs.Items[i]
		has := slices.Contains(pv.Finalizers, Finalizer)
		if !ours(pv) || has == on || (on && pv.DeletionTimestamp != nil) {
			continue
		}
		finalizers := slices.DeleteFunc(slices.Clone(pv.Finalizers), func(f string) bool { return f == Finalizer })
		if on {
			finalizers = append(finalizers, Finalizer)
		}
		if err := patchFinalizers(ctx, client, pv, finalizers); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("PersistentVolume %s: %w", pv.Name, err)
		}
	}
	return nil
}

// patchFinalizers sets pv's finalizers, if pv has not changed since it was
// read (its resourceVersion).
func patchFinalizers(ctx context.Context, client kubernetes.Interface, pv *corev1.PersistentVolume, finalizers []string) error {
	if finalizers == nil {
		finalizers = []string{}
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": pv.ResourceVersion,
		"finalizers":      finalizers,
	}})
	if err != nil {
		return err
	}
	_, err = client.CoreV1().PersistentVolumes().Patch(ctx, pv.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}
