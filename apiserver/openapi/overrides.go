package openapi

import (
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// fieldOverride carries what upstream's source markers (+listType,
// +listMapKey, +mapType, +default) say about one property, which reflection
// over struct tags cannot see.
type fieldOverride struct {
	listType string   // "atomic", "set" or "map"
	mapKeys  []string // for listType "map"
	mapType  string   // "atomic" or "granular"
	dflt     any      // default value
}

func (o fieldOverride) apply(s *spec.Schema) {
	if o.listType != "" {
		s.AddExtension(extListType, o.listType)
		delete(s.Extensions, extListMapKeys)
		if o.listType == "map" {
			keys := make([]interface{}, len(o.mapKeys))
			for i, k := range o.mapKeys {
				keys[i] = k
			}
			s.AddExtension(extListMapKeys, keys)
		}
	}
	if o.mapType != "" {
		s.AddExtension(extMapType, o.mapType)
	}
	if o.dflt != nil {
		s.Default = o.dflt
	}
}

// mapList returns an override making a list associative on keys.
func mapList(keys ...string) fieldOverride { return fieldOverride{listType: "map", mapKeys: keys} }

var (
	atomicList = fieldOverride{listType: "atomic"}
	setList    = fieldOverride{listType: "set"}
)

// fieldOverrides is keyed by "DefinitionName.jsonField". It lists the
// well-known properties whose upstream +listType/+listMapKey/+mapType markers
// differ from what the patchStrategy/patchMergeKey tags imply, plus the
// defaults that let structured-merge-diff fill in omitted list-map keys.
var fieldOverrides = map[string]fieldOverride{
	// meta/v1
	"io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta.ownerReferences": mapList("uid"),
	"io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta.finalizers":      setList,
	"io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta.managedFields":   atomicList,

	// core/v1 pods and containers
	"io.k8s.api.core.v1.PodSpec.containers":                     mapList("name"),
	"io.k8s.api.core.v1.PodSpec.initContainers":                 mapList("name"),
	"io.k8s.api.core.v1.PodSpec.ephemeralContainers":            mapList("name"),
	"io.k8s.api.core.v1.PodSpec.volumes":                        mapList("name"),
	"io.k8s.api.core.v1.PodSpec.topologySpreadConstraints":      mapList("topologyKey", "whenUnsatisfiable"),
	"io.k8s.api.core.v1.PodSpec.nodeSelector":                   {mapType: "atomic"},
	"io.k8s.api.core.v1.PodStatus.conditions":                   mapList("type"),
	"io.k8s.api.core.v1.PodStatus.hostIPs":                      atomicList,
	"io.k8s.api.core.v1.Container.ports":                        mapList("containerPort", "protocol"),
	"io.k8s.api.core.v1.EphemeralContainer.ports":               mapList("containerPort", "protocol"),
	"io.k8s.api.core.v1.ContainerPort.protocol":                 {dflt: "TCP"},
	"io.k8s.api.core.v1.ResourceRequirements.claims":            mapList("name"),
	"io.k8s.api.core.v1.ResourceStatus.resources":               mapList("resourceID"),
	"io.k8s.api.core.v1.ContainerRestartRuleOnExitCodes.values": setList,

	// core/v1 services, nodes, replication controllers
	"io.k8s.api.core.v1.ServiceSpec.ports":                     mapList("port", "protocol"),
	"io.k8s.api.core.v1.ServiceSpec.selector":                  {mapType: "atomic"},
	"io.k8s.api.core.v1.ServicePort.protocol":                  {dflt: "TCP"},
	"io.k8s.api.core.v1.NodeStatus.conditions":                 mapList("type"),
	"io.k8s.api.core.v1.ReplicationControllerSpec.selector":    {mapType: "atomic"},
	"io.k8s.api.core.v1.PersistentVolumeSpec.claimRef":         {mapType: "granular"},
	"io.k8s.api.node.v1.Scheduling.nodeSelector":               {mapType: "atomic"},
	"io.k8s.api.discovery.v1.Endpoint.addresses":               setList,
	"io.k8s.api.storage.v1.CSIDriverSpec.volumeLifecycleModes": setList,

	// batch/v1
	"io.k8s.api.batch.v1.JobStatus.conditions":                          atomicList,
	"io.k8s.api.batch.v1.PodFailurePolicyOnExitCodesRequirement.values": setList,
	"io.k8s.api.batch.v1.UncountedTerminatedPods.succeeded":             setList,
	"io.k8s.api.batch.v1.UncountedTerminatedPods.failed":                setList,

	// conditions lists of other groups
	"io.k8s.api.admissionregistration.v1.ValidatingAdmissionPolicyStatus.conditions":             mapList("type"),
	"io.k8s.api.admissionregistration.v1.ValidatingAdmissionPolicyBindingSpec.validationActions": setList,
	"io.k8s.api.certificates.v1.CertificateSigningRequestStatus.conditions":                      mapList("type"),

	// flowcontrol/v1
	"io.k8s.api.flowcontrol.v1.ResourcePolicyRule.verbs":              setList,
	"io.k8s.api.flowcontrol.v1.ResourcePolicyRule.apiGroups":          setList,
	"io.k8s.api.flowcontrol.v1.ResourcePolicyRule.resources":          setList,
	"io.k8s.api.flowcontrol.v1.ResourcePolicyRule.namespaces":         setList,
	"io.k8s.api.flowcontrol.v1.NonResourcePolicyRule.verbs":           setList,
	"io.k8s.api.flowcontrol.v1.NonResourcePolicyRule.nonResourceURLs": setList,
}

// atomicStruct marks a definition as replaced as a whole by server-side
// apply (upstream's +structType=atomic).
var atomicStruct = map[string]interface{}{extMapType: "atomic"}

// typeOverrides sets extensions on whole definitions, keyed by definition
// name: upstream's +structType=atomic markers, and the schemas of the types
// whose JSON form is arbitrary.
var typeOverrides = map[string]map[string]interface{}{
	"io.k8s.apimachinery.pkg.runtime.RawExtension":                       {extPreserveUnknown: true},
	"io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSON":      {extPreserveUnknown: true},
	"io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1beta1.JSON": {extPreserveUnknown: true},

	"io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector":  atomicStruct,
	"io.k8s.apimachinery.pkg.apis.meta.v1.OwnerReference": atomicStruct,

	"io.k8s.api.core.v1.ConfigMapKeySelector":      atomicStruct,
	"io.k8s.api.core.v1.EndpointAddress":           atomicStruct,
	"io.k8s.api.core.v1.EndpointPort":              atomicStruct,
	"io.k8s.api.core.v1.FileKeySelector":           atomicStruct,
	"io.k8s.api.core.v1.LocalObjectReference":      atomicStruct,
	"io.k8s.api.core.v1.NodeSelector":              atomicStruct,
	"io.k8s.api.core.v1.NodeSelectorTerm":          atomicStruct,
	"io.k8s.api.core.v1.ObjectFieldSelector":       atomicStruct,
	"io.k8s.api.core.v1.ObjectReference":           atomicStruct,
	"io.k8s.api.core.v1.ResourceFieldSelector":     atomicStruct,
	"io.k8s.api.core.v1.ScopeSelector":             atomicStruct,
	"io.k8s.api.core.v1.SecretKeySelector":         atomicStruct,
	"io.k8s.api.core.v1.SecretReference":           atomicStruct,
	"io.k8s.api.core.v1.TopologySelectorTerm":      atomicStruct,
	"io.k8s.api.core.v1.TypedLocalObjectReference": atomicStruct,

	"io.k8s.api.admissionregistration.v1.MatchResources":          atomicStruct,
	"io.k8s.api.admissionregistration.v1.NamedRuleWithOperations": atomicStruct,
	"io.k8s.api.admissionregistration.v1.ParamKind":               atomicStruct,
	"io.k8s.api.admissionregistration.v1.ParamRef":                atomicStruct,
	"io.k8s.api.admissionregistration.v1.Variable":                atomicStruct,
	"io.k8s.api.autoscaling.v1.CrossVersionObjectReference":       atomicStruct,
	"io.k8s.api.discovery.v1.EndpointPort":                        atomicStruct,
	"io.k8s.api.networking.v1.ServiceBackendPort":                 atomicStruct,
	"io.k8s.api.rbac.v1.RoleRef":                                  atomicStruct,
	"io.k8s.api.rbac.v1.Subject":                                  atomicStruct,
}

// applyTypeOverride applies typeOverrides[name] to s.
func applyTypeOverride(name string, s *spec.Schema) {
	for k, v := range typeOverrides[name] {
		s.AddExtension(k, v)
	}
}

// builtinDescriptions describes the apimachinery types that have no
// SwaggerDoc method.
var builtinDescriptions = map[string]string{
	"io.k8s.apimachinery.pkg.apis.meta.v1.Time":       "Time is a wrapper around time.Time which supports correct marshaling to YAML and JSON. Wrappers are provided for many of the factory methods that the time package offers.",
	"io.k8s.apimachinery.pkg.apis.meta.v1.MicroTime":  "MicroTime is version of Time with microsecond level precision.",
	"io.k8s.apimachinery.pkg.apis.meta.v1.Duration":   "Duration is a wrapper around time.Duration which supports correct marshaling to YAML and JSON. In particular, it marshals into strings, which can be used as map keys in json.",
	"io.k8s.apimachinery.pkg.api.resource.Quantity":   "Quantity is a fixed-point representation of a number, serialized as a string such as \"100m\", \"1.5Gi\" or \"2e3\": a signed decimal number followed by an optional binary-SI suffix (Ki, Mi, Gi, Ti, Pi, Ei), decimal-SI suffix (m, k, M, G, T, P, E) or decimal exponent (e<n> / E<n>).",
	"io.k8s.apimachinery.pkg.util.intstr.IntOrString": "IntOrString is a type that can hold an int32 or a string.  When used in JSON or YAML marshalling and unmarshalling, it produces or consumes the inner type.  This allows you to have, for example, a JSON field that can accept a name or number.",
	"io.k8s.apimachinery.pkg.runtime.RawExtension":    "RawExtension is used to hold extensions in external versions. It holds an arbitrary JSON object that the receiving side decodes according to its apiVersion and kind.",
}
