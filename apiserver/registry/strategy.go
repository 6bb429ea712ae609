package registry

import (
	"context"

	"github.com/sqlkube/sqlkube/apiserver/scheme"
	"k8s.io/apimachinery/pkg/api/meta"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/kubernetes/pkg/api/legacyscheme"

	"k8s.io/kube-aggregator/pkg/registry/apiservice"
	"k8s.io/kubernetes/pkg/registry/admissionregistration/mutatingwebhookconfiguration"
	"k8s.io/kubernetes/pkg/registry/admissionregistration/validatingwebhookconfiguration"
	"k8s.io/kubernetes/pkg/registry/apps/controllerrevision"
	"k8s.io/kubernetes/pkg/registry/apps/daemonset"
	"k8s.io/kubernetes/pkg/registry/apps/deployment"
	"k8s.io/kubernetes/pkg/registry/apps/replicaset"
	"k8s.io/kubernetes/pkg/registry/apps/statefulset"
	"k8s.io/kubernetes/pkg/registry/autoscaling/horizontalpodautoscaler"
	"k8s.io/kubernetes/pkg/registry/batch/cronjob"
	"k8s.io/kubernetes/pkg/registry/batch/job"
	csr "k8s.io/kubernetes/pkg/registry/certificates/certificates"
	"k8s.io/kubernetes/pkg/registry/certificates/clustertrustbundle"
	"k8s.io/kubernetes/pkg/registry/coordination/lease"
	"k8s.io/kubernetes/pkg/registry/core/configmap"
	"k8s.io/kubernetes/pkg/registry/core/endpoint"
	"k8s.io/kubernetes/pkg/registry/core/event"
	"k8s.io/kubernetes/pkg/registry/core/limitrange"
	"k8s.io/kubernetes/pkg/registry/core/namespace"
	"k8s.io/kubernetes/pkg/registry/core/node"
	"k8s.io/kubernetes/pkg/registry/core/persistentvolume"
	"k8s.io/kubernetes/pkg/registry/core/persistentvolumeclaim"
	"k8s.io/kubernetes/pkg/registry/core/pod"
	"k8s.io/kubernetes/pkg/registry/core/podtemplate"
	"k8s.io/kubernetes/pkg/registry/core/replicationcontroller"
	"k8s.io/kubernetes/pkg/registry/core/resourcequota"
	"k8s.io/kubernetes/pkg/registry/core/secret"
	"k8s.io/kubernetes/pkg/registry/core/service"
	"k8s.io/kubernetes/pkg/registry/core/serviceaccount"
	"k8s.io/kubernetes/pkg/registry/discovery/endpointslice"
	"k8s.io/kubernetes/pkg/registry/flowcontrol/flowschema"
	"k8s.io/kubernetes/pkg/registry/flowcontrol/prioritylevelconfiguration"
	"k8s.io/kubernetes/pkg/registry/networking/ingress"
	"k8s.io/kubernetes/pkg/registry/networking/ingressclass"
	"k8s.io/kubernetes/pkg/registry/networking/ipaddress"
	"k8s.io/kubernetes/pkg/registry/networking/networkpolicy"
	"k8s.io/kubernetes/pkg/registry/networking/servicecidr"
	"k8s.io/kubernetes/pkg/registry/node/runtimeclass"
	"k8s.io/kubernetes/pkg/registry/policy/poddisruptionbudget"
	"k8s.io/kubernetes/pkg/registry/rbac/clusterrole"
	"k8s.io/kubernetes/pkg/registry/rbac/clusterrolebinding"
	"k8s.io/kubernetes/pkg/registry/rbac/role"
	"k8s.io/kubernetes/pkg/registry/rbac/rolebinding"
	"k8s.io/kubernetes/pkg/registry/resource/deviceclass"
	"k8s.io/kubernetes/pkg/registry/resource/devicetaintrule"
	"k8s.io/kubernetes/pkg/registry/resource/resourceslice"
	"k8s.io/kubernetes/pkg/registry/scheduling/priorityclass"
	"k8s.io/kubernetes/pkg/registry/storage/csidriver"
	"k8s.io/kubernetes/pkg/registry/storage/csinode"
	"k8s.io/kubernetes/pkg/registry/storage/csistoragecapacity"
	"k8s.io/kubernetes/pkg/registry/storage/storageclass"
	"k8s.io/kubernetes/pkg/registry/storage/volumeattachment"
	"k8s.io/kubernetes/pkg/registry/storage/volumeattributesclass"
	"k8s.io/kubernetes/pkg/registry/storagemigration/storagemigration"
)

// Strategy is Kubernetes' own behaviour for one type on create and update
// (k8s.io/kubernetes/pkg/registry/...): what the server owns on a new
// object (status reset, generation), dropped disabled fields, validation
// and warnings. Strategies work on internal versions; convertStrategy
// runs them on the served version.
type Strategy interface {
	rest.RESTCreateStrategy
	rest.RESTUpdateStrategy
}

// strategies are the built-in types' strategies by group and resource;
// statusStrategies those of their status subresources.
var (
	strategies = map[schema.GroupResource]Strategy{
		{Group: "certificates.k8s.io", Resource: "certificatesigningrequests"}: csr.Strategy,
		{Group: "certificates.k8s.io", Resource: "clustertrustbundles"}:        clustertrustbundle.Strategy,
		{Resource: "namespaces"}:                                                             namespace.Strategy,
		{Resource: "configmaps"}:                                                             configmap.Strategy,
		{Resource: "secrets"}:                                                                secret.Strategy,
		{Resource: "serviceaccounts"}:                                                        serviceaccount.Strategy,
		{Resource: "pods"}:                                                                   pod.Strategy,
		{Resource: "nodes"}:                                                                  node.Strategy,
		{Resource: "services"}:                                                               service.Strategy,
		{Resource: "endpoints"}:                                                              endpoint.Strategy,
		{Resource: "events"}:                                                                 event.Strategy,
		{Resource: "persistentvolumes"}:                                                      persistentvolume.Strategy,
		{Resource: "persistentvolumeclaims"}:                                                 persistentvolumeclaim.Strategy,
		{Resource: "limitranges"}:                                                            limitrange.Strategy,
		{Resource: "resourcequotas"}:                                                         resourcequota.Strategy,
		{Group: "apps", Resource: "deployments"}:                                             deployment.Strategy,
		{Group: "apps", Resource: "replicasets"}:                                             replicaset.Strategy,
		{Group: "apps", Resource: "statefulsets"}:                                            statefulset.Strategy,
		{Group: "apps", Resource: "daemonsets"}:                                              daemonset.Strategy,
		{Group: "apps", Resource: "controllerrevisions"}:                                     controllerrevision.Strategy,
		{Group: "batch", Resource: "jobs"}:                                                   job.Strategy,
		{Group: "batch", Resource: "cronjobs"}:                                               cronjob.Strategy,
		{Group: "coordination.k8s.io", Resource: "leases"}:                                   lease.Strategy,
		{Group: "discovery.k8s.io", Resource: "endpointslices"}:                              endpointslice.Strategy,
		{Group: "events.k8s.io", Resource: "events"}:                                         event.Strategy,
		{Group: "policy", Resource: "poddisruptionbudgets"}:                                  poddisruptionbudget.Strategy,
		{Group: "scheduling.k8s.io", Resource: "priorityclasses"}:                            priorityclass.Strategy,
		{Group: "rbac.authorization.k8s.io", Resource: "roles"}:                              role.Strategy,
		{Group: "rbac.authorization.k8s.io", Resource: "rolebindings"}:                       rolebinding.Strategy,
		{Group: "rbac.authorization.k8s.io", Resource: "clusterroles"}:                       clusterrole.Strategy,
		{Group: "rbac.authorization.k8s.io", Resource: "clusterrolebindings"}:                clusterrolebinding.Strategy,
		{Group: "storage.k8s.io", Resource: "volumeattachments"}:                             volumeattachment.Strategy,
		{Group: "storage.k8s.io", Resource: "csidrivers"}:                                    csidriver.Strategy,
		{Resource: "replicationcontrollers"}:                                                 replicationcontroller.Strategy,
		{Resource: "podtemplates"}:                                                           podtemplate.Strategy,
		{Group: "autoscaling", Resource: "horizontalpodautoscalers"}:                         horizontalpodautoscaler.Strategy,
		{Group: "node.k8s.io", Resource: "runtimeclasses"}:                                   runtimeclass.Strategy,
		{Group: "storage.k8s.io", Resource: "storageclasses"}:                                storageclass.Strategy,
		{Group: "storage.k8s.io", Resource: "csinodes"}:                                      csinode.Strategy,
		{Group: "storage.k8s.io", Resource: "csistoragecapacities"}:                          csistoragecapacity.Strategy,
		{Group: "storage.k8s.io", Resource: "volumeattributesclasses"}:                       volumeattributesclass.Strategy,
		{Group: "networking.k8s.io", Resource: "ingresses"}:                                  ingress.Strategy,
		{Group: "networking.k8s.io", Resource: "ingressclasses"}:                             ingressclass.Strategy,
		{Group: "networking.k8s.io", Resource: "networkpolicies"}:                            networkpolicy.Strategy,
		{Group: "networking.k8s.io", Resource: "ipaddresses"}:                                ipaddress.Strategy,
		{Group: "networking.k8s.io", Resource: "servicecidrs"}:                               servicecidr.Strategy,
		{Group: "resource.k8s.io", Resource: "deviceclasses"}:                                deviceclass.Strategy,
		{Group: "resource.k8s.io", Resource: "resourceslices"}:                               resourceslice.Strategy,
		{Group: "resource.k8s.io", Resource: "devicetaintrules"}:                             devicetaintrule.Strategy,
		{Group: "storagemigration.k8s.io", Resource: "storageversionmigrations"}:             storagemigration.Strategy,
		{Group: "admissionregistration.k8s.io", Resource: "mutatingwebhookconfigurations"}:   mutatingwebhookconfiguration.Strategy,
		{Group: "admissionregistration.k8s.io", Resource: "validatingwebhookconfigurations"}: validatingwebhookconfiguration.Strategy,
		{Group: "apiregistration.k8s.io", Resource: "apiservices"}:                           apiservice.Strategy,
		{Group: "flowcontrol.apiserver.k8s.io", Resource: "flowschemas"}:                     flowschema.Strategy,
		{Group: "flowcontrol.apiserver.k8s.io", Resource: "prioritylevelconfigurations"}:     prioritylevelconfiguration.Strategy,
	}
	approvalStrategies = map[schema.GroupResource]rest.RESTUpdateStrategy{
		{Group: "certificates.k8s.io", Resource: "certificatesigningrequests"}: csr.ApprovalStrategy,
	}
	statusStrategies = map[schema.GroupResource]rest.RESTUpdateStrategy{
		{Group: "certificates.k8s.io", Resource: "certificatesigningrequests"}: csr.StatusStrategy,
		{Resource: "namespaces"}:                                                         namespace.StatusStrategy,
		{Resource: "pods"}:                                                               pod.StatusStrategy,
		{Resource: "nodes"}:                                                              node.StatusStrategy,
		{Resource: "services"}:                                                           service.StatusStrategy,
		{Resource: "persistentvolumes"}:                                                  persistentvolume.StatusStrategy,
		{Resource: "persistentvolumeclaims"}:                                             persistentvolumeclaim.StatusStrategy,
		{Resource: "resourcequotas"}:                                                     resourcequota.StatusStrategy,
		{Group: "apps", Resource: "deployments"}:                                         deployment.StatusStrategy,
		{Group: "apps", Resource: "replicasets"}:                                         replicaset.StatusStrategy,
		{Group: "apps", Resource: "statefulsets"}:                                        statefulset.StatusStrategy,
		{Group: "apps", Resource: "daemonsets"}:                                          daemonset.StatusStrategy,
		{Group: "batch", Resource: "jobs"}:                                               job.StatusStrategy,
		{Group: "batch", Resource: "cronjobs"}:                                           cronjob.StatusStrategy,
		{Group: "policy", Resource: "poddisruptionbudgets"}:                              poddisruptionbudget.StatusStrategy,
		{Group: "storage.k8s.io", Resource: "volumeattachments"}:                         volumeattachment.StatusStrategy,
		{Group: "storage.k8s.io", Resource: "csinodes"}:                                  csinode.StatusStrategy,
		{Group: "resource.k8s.io", Resource: "devicetaintrules"}:                         devicetaintrule.StatusStrategy,
		{Group: "storagemigration.k8s.io", Resource: "storageversionmigrations"}:         storagemigration.StatusStrategy,
		{Resource: "replicationcontrollers"}:                                             replicationcontroller.StatusStrategy,
		{Group: "autoscaling", Resource: "horizontalpodautoscalers"}:                     horizontalpodautoscaler.StatusStrategy,
		{Group: "networking.k8s.io", Resource: "ingresses"}:                              ingress.StatusStrategy,
		{Group: "networking.k8s.io", Resource: "servicecidrs"}:                           servicecidr.StatusStrategy,
		{Group: "apiregistration.k8s.io", Resource: "apiservices"}:                       apiservice.NewStatusStrategy(legacyscheme.Scheme),
		{Group: "flowcontrol.apiserver.k8s.io", Resource: "flowschemas"}:                 flowschema.StatusStrategy,
		{Group: "flowcontrol.apiserver.k8s.io", Resource: "prioritylevelconfigurations"}: prioritylevelconfiguration.StatusStrategy,
	}
	// subresourceStrategies are those of the resources'
	// ObjectSubresources, by subresource: what each may change of the
	// object (a pod's ephemeral containers; its containers' resources
	// and resize policies) and how that is validated.
	subresourceStrategies = map[schema.GroupResource]map[string]rest.RESTUpdateStrategy{
		{Resource: "pods"}: {"ephemeralcontainers": pod.EphemeralContainersStrategy, "resize": pod.ResizeStrategy},
	}
)

// EffectiveStrategy is r's Strategy, or its entry in strategies (nil if none).
func (r *Resource) EffectiveStrategy() Strategy {
	if r.Strategy != nil {
		return r.Strategy
	}
	return strategies[r.GroupResource()]
}

// StrategyResult is what a strategy made of an object: the object to
// store (served version), validation errors and warnings.
type StrategyResult struct {
	Obj      runtime.Object
	Errs     field.ErrorList
	Warnings []string
}

// StrategyCreate runs the resource's create strategy on obj (defaulted,
// served version). Without a strategy obj is returned as it is.
func StrategyCreate(ctx context.Context, r *Resource, obj runtime.Object) (StrategyResult, error) {
	st := r.EffectiveStrategy()
	if st == nil {
		return StrategyResult{Obj: obj}, nil
	}
	in, err := scheme.ToInternal(obj)
	if err != nil {
		return StrategyResult{}, err
	}
	st.PrepareForCreate(ctx, in)
	// rest.ValidateCreate: the strategy's validation, then ObjectMeta's,
	// then the type's declarative (+k8s: tag) rules, as kube-apiserver runs
	// them; the last need the request's RequestInfo in ctx.
	res := StrategyResult{Errs: rest.ValidateCreate(ctx, in, st)}
	if len(res.Errs) == 0 {
		res.Warnings = st.WarningsOnCreate(ctx, in)
	}
	st.Canonicalize(in)
	res.Obj, err = scheme.FromInternal(in, r.New)
	return res, err
}

// UpdateStrategy is the Kubernetes strategy an update of r (or of its
// status, approval or another of its ObjectSubresources) goes through, or
// nil if it has none.
func UpdateStrategy(r *Resource, subresource string) rest.RESTUpdateStrategy {
	if st, ok := subresourceStrategies[r.GroupResource()][subresource]; ok {
		return st
	}
	switch subresource {
	case "status":
		if r.StatusStrategy != nil {
			return r.StatusStrategy
		}
		if st, ok := statusStrategies[r.GroupResource()]; ok {
			return st
		}
	case "approval":
		if st, ok := approvalStrategies[r.GroupResource()]; ok {
			return st
		}
	default:
		if s := r.EffectiveStrategy(); s != nil {
			return s
		}
	}
	return nil
}

// StrategyUpdate runs the resource's update strategy (that of the
// subresource when subresource names one) on updated against existing.
func StrategyUpdate(ctx context.Context, r *Resource, subresource string, existing, updated runtime.Object) (StrategyResult, error) {
	st := UpdateStrategy(r, subresource)
	if st == nil {
		return StrategyResult{Obj: updated}, nil
	}
	oldIn, err := scheme.ToInternal(existing)
	if err != nil {
		return StrategyResult{}, err
	}
	newIn, err := scheme.ToInternal(updated)
	if err != nil {
		return StrategyResult{}, err
	}
	st.PrepareForUpdate(ctx, newIn, oldIn)
	// As rest.BeforeUpdate after the strategy: an update never removes or
	// changes a deletion timestamp or grace period (the pod status
	// EffectiveStrategy clears them from its copy).
	if oldMeta, err := meta.Accessor(oldIn); err == nil {
		if newMeta, err := meta.Accessor(newIn); err == nil {
			if !oldMeta.GetDeletionTimestamp().IsZero() {
				newMeta.SetDeletionTimestamp(oldMeta.GetDeletionTimestamp())
			}
			if oldMeta.GetDeletionGracePeriodSeconds() != nil && newMeta.GetDeletionGracePeriodSeconds() == nil {
				newMeta.SetDeletionGracePeriodSeconds(oldMeta.GetDeletionGracePeriodSeconds())
			}
		}
	}
	// rest.ValidateUpdate: common fields, the strategy's validation and
	// the declarative rules, as for create.
	res := StrategyResult{Errs: rest.ValidateUpdate(ctx, newIn, oldIn, st)}
	if len(res.Errs) == 0 {
		res.Warnings = st.WarningsOnUpdate(ctx, newIn, oldIn)
	}
	st.Canonicalize(newIn)
	res.Obj, err = scheme.FromInternal(newIn, r.New)
	return res, err
}
