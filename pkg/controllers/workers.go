package controllers

import (
	cmoptions "k8s.io/kubernetes/cmd/kube-controller-manager/app/options"
	"k8s.io/kubernetes/cmd/kube-controller-manager/names"
)

// leanDisabledControllers are off in the small profile. The
// ValidatingAdmissionPolicy status controller only fills in type-checking
// warnings for policy authors, and keeps its own copy of every built-in
// type's OpenAPI schema (~8 MiB of heap) to do it; the policies themselves
// are enforced by the API server either way.
var leanDisabledControllers = []string{names.ValidatingAdmissionPolicyStatusController}

// capWorkers lowers every controller's concurrent syncs to at most max
// (a resource profile's setting; 0 keeps upstream's defaults). Upstream runs
// 5-50 workers per controller (the ResourceClaim controller 50), sized for
// clusters of thousands of objects; an edge host has tens. TestCapWorkers
// finds every concurrent-syncs setting of the options, so that one upstream
// adds is not left at its default. Some controllers have no setting
// (the node IPAM range allocator's 30 workers, the CSR controllers' 5 each).
func capWorkers(s *cmoptions.KubeControllerManagerOptions, max int32) {
	if max <= 0 {
		return
	}
	for _, p := range []*int32{
		&s.DaemonSetController.ConcurrentDaemonSetSyncs,
		&s.DeviceTaintEvictionController.ConcurrentSyncs,
		&s.DisruptionController.ConcurrentDisruptionSyncs,
		&s.ResourceClaimController.ConcurrentSyncs,
		&s.DeploymentController.ConcurrentDeploymentSyncs,
		&s.StatefulSetController.ConcurrentStatefulSetSyncs,
		&s.EndpointController.ConcurrentEndpointSyncs,
		&s.EndpointSliceController.ConcurrentServiceEndpointSyncs,
		&s.EndpointSliceMirroringController.MirroringConcurrentServiceEndpointSyncs,
		&s.EphemeralVolumeController.ConcurrentEphemeralVolumeSyncs,
		&s.GarbageCollectorController.ConcurrentGCSyncs,
		&s.HPAController.ConcurrentHorizontalPodAutoscalerSyncs,
		&s.JobController.ConcurrentJobSyncs,
		&s.CronJobController.ConcurrentCronJobSyncs,
		&s.NamespaceController.ConcurrentNamespaceSyncs,
		&s.ReplicaSetController.ConcurrentRSSyncs,
		&s.ReplicationController.ConcurrentRCSyncs,
		&s.ResourceQuotaController.ConcurrentResourceQuotaSyncs,
		&s.SAController.ConcurrentSATokenSyncs,
		&s.TTLAfterFinishedController.ConcurrentTTLSyncs,
		&s.ValidatingAdmissionPolicyStatusController.ConcurrentPolicySyncs,
	} {
		*p = min(*p, max)
	}
}
