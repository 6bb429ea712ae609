package admission

import (
	"fmt"
	"io"
	"slices"

	"github.com/sqlkube/sqlkube/apiserver/registry"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/namespace/lifecycle"
	policymutating "k8s.io/apiserver/pkg/admission/plugin/policy/mutating"
	policyvalidating "k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/admission/plugin/resourcequota"
	mutatingwebhook "k8s.io/apiserver/pkg/admission/plugin/webhook/mutating"
	validatingwebhook "k8s.io/apiserver/pkg/admission/plugin/webhook/validating"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	certapproval "k8s.io/kubernetes/plugin/pkg/admission/certificates/approval"
	"k8s.io/kubernetes/plugin/pkg/admission/certificates/ctbattest"
	certsigning "k8s.io/kubernetes/plugin/pkg/admission/certificates/signing"
	certsubjectrestriction "k8s.io/kubernetes/plugin/pkg/admission/certificates/subjectrestriction"
	"k8s.io/kubernetes/plugin/pkg/admission/defaulttolerationseconds"
	"k8s.io/kubernetes/plugin/pkg/admission/limitranger"
	"k8s.io/kubernetes/plugin/pkg/admission/network/defaultingressclass"
	"k8s.io/kubernetes/plugin/pkg/admission/nodedeclaredfeatures"
	"k8s.io/kubernetes/plugin/pkg/admission/nodetaint"
	"k8s.io/kubernetes/plugin/pkg/admission/podresize"
	"k8s.io/kubernetes/plugin/pkg/admission/podtopologylabels"
	"k8s.io/kubernetes/plugin/pkg/admission/priority"
	"k8s.io/kubernetes/plugin/pkg/admission/runtimeclass"
	"k8s.io/kubernetes/plugin/pkg/admission/scheduling/podgroupprotection"
	"k8s.io/kubernetes/plugin/pkg/admission/security/podsecurity"
	"k8s.io/kubernetes/plugin/pkg/admission/serviceaccount"
	"k8s.io/kubernetes/plugin/pkg/admission/storage/persistentvolume/resize"
	"k8s.io/kubernetes/plugin/pkg/admission/storage/storageclass/setdefault"
	"k8s.io/kubernetes/plugin/pkg/admission/storage/storageobjectinuseprotection"
)

// Admission is Kubernetes' own admission plugins, run as kube-apiserver
// runs them on every create, update (patch, apply and the status
// subresource included) and delete: first every mutating plugin in
// admissionOrder, then the object's defaults and the type's strategy
// (validation), then every validating plugin in the same order, then
// storage. Built-in objects reach the plugins in their internal version
// (legacyscheme), as the plugins expect; custom resources as they are
// served. A dry run is admitted like the real request, but ResourceQuota
// charges nothing for it.
//
// Subresource writes with bodies of their own (pods/binding,
// pods/eviction, serviceaccounts/token) are admitted with their body's
// kind, namespaces/finalize as an update, the proxies as a CONNECT with
// their options; validating admission of a delete sees the stored object
// (oldObject), right before it is deleted. Webhooks and admission
// policies (MutatingAdmissionPolicy, ValidatingAdmissionPolicy):
// webhook.go.
//
// Errors are the plugins' own: 403 Forbidden with their message (quota
// exceeded, PodSecurity violations, a missing service account or
// RuntimeClass, a terminating namespace, a claim resize its class does
// not allow, approving or signing for a signer without its verb), 404 for a namespace that does
// not exist, 422 for LimitRanger's min/max violations and denying
// policies; a webhook's denial has the webhook's code (400 without one),
// a webhook that cannot be called (down, too slow, answering garbage)
// under failurePolicy Fail is a 500 "failed calling webhook", as
// kube-apiserver answers.

// admissionOrder is the order kube-apiserver runs the plugins sqlkube
// enables (its AllOrderedPlugins), whatever order a configuration names
// them in: every plugin kube-apiserver 1.37 enables by default. The
// gated ones (PodGroupProtection, PodTopologyLabels,
// NodeDeclaredFeatureValidator, PodResizeValidator, ClusterTrustBundleAttest)
// do nothing while their feature gate is off.
var admissionOrder = []string{
	lifecycle.PluginName,      // NamespaceLifecycle
	limitranger.PluginName,    // LimitRanger
	serviceaccount.PluginName, // ServiceAccount
	// NodeRestriction goes here (with the Node authorizer): after
	// ServiceAccount, before TaintNodesByCondition, as upstream.
	nodetaint.PluginName,                    // TaintNodesByCondition
	podsecurity.PluginName,                  // PodSecurity
	priority.PluginName,                     // Priority
	defaulttolerationseconds.PluginName,     // DefaultTolerationSeconds
	setdefault.PluginName,                   // DefaultStorageClass
	storageobjectinuseprotection.PluginName, // StorageObjectInUseProtection
	podgroupprotection.PluginName,           // PodGroupProtection
	resize.PluginName,                       // PersistentVolumeClaimResize
	runtimeclass.PluginName,                 // RuntimeClass
	certapproval.PluginName,                 // CertificateApproval
	certsigning.PluginName,                  // CertificateSigning
	ctbattest.PluginName,                    // ClusterTrustBundleAttest
	certsubjectrestriction.PluginName,       // CertificateSubjectRestriction
	defaultingressclass.PluginName,          // DefaultIngressClass
	podtopologylabels.PluginName,            // PodTopologyLabels
	nodedeclaredfeatures.PluginName,         // NodeDeclaredFeatureValidator
	podresize.PluginName,                    // PodResizeValidator
	// Policies, webhooks and quota go at the end, as upstream.
	policymutating.PluginName,    // MutatingAdmissionPolicy
	mutatingwebhook.PluginName,   // MutatingAdmissionWebhook
	policyvalidating.PluginName,  // ValidatingAdmissionPolicy
	validatingwebhook.PluginName, // ValidatingAdmissionWebhook
	resourcequota.PluginName,     // ResourceQuota, last, as upstream
}

// DefaultPlugins are the admission plugins a server runs unless
// Config.DisableAdmissionPlugins turns some off, in the order they run.
func DefaultPlugins() []string { return slices.Clone(admissionOrder) }

// errUnknownAdmissionPlugin names a plugin sqlkube does not have.
type errUnknownAdmissionPlugin string

func (e errUnknownAdmissionPlugin) Error() string {
	return fmt.Sprintf("apiserver: unknown admission plugin %q (known: %v)", string(e), admissionOrder)
}

// enabledAdmissionPlugins is admissionOrder without the disabled ones.
func enabledAdmissionPlugins(disabled []string) ([]string, error) {
	for _, name := range disabled {
		if !slices.Contains(admissionOrder, name) {
			return nil, errUnknownAdmissionPlugin(name)
		}
	}
	return slices.DeleteFunc(DefaultPlugins(), func(name string) bool { return slices.Contains(disabled, name) }), nil
}

// ChainOptions are what the admission chain is built over.
type ChainOptions struct {
	// Client and Loopback reach the API server in-process; Informers are
	// its shared informers (requested by newChain, so build the chain
	// before the factory starts).
	Client    kubernetes.Interface
	Loopback  *rest.Config
	Informers informers.SharedInformerFactory
	// Authorizer is the server's, for the plugins that ask it.
	Authorizer authorizer.Authorizer
	// Disabled are the plugins turned off (--disable-admission-plugins).
	Disabled []string
	// NoMetrics leaves the admission metrics out (benchmarks that
	// measure their cost).
	NoMetrics bool
	// OpenAPIGeneration, when set, changes whenever the server's
	// /openapi/v3 index may have, or reports false while it cannot
	// tell: mutating policies then read the index again only when it
	// changes, not every 5 s (openAPIPaths).
	OpenAPIGeneration func() (generation uint64, ok bool)
}

// NewChain builds the admission chain: every plugin of
// DefaultPlugins but the disabled ones, in kube-apiserver's
// order. stop ends ResourceQuota's evaluators and the webhooks' REST
// mapper resets.
func NewChain(opts ChainOptions, stop <-chan struct{}) (admission.Interface, error) {
	names, err := enabledAdmissionPlugins(opts.Disabled)
	if err != nil {
		return nil, err
	}
	plugins := admission.NewPlugins()
	plugins.Register(lifecycle.PluginName, func(io.Reader) (admission.Interface, error) {
		// kube-node-lease too: node heartbeats depend on it.
		return lifecycle.NewLifecycle(sets.New(registry.SystemNamespaces...))
	})
	limitranger.Register(plugins)
	serviceaccount.Register(plugins)
	nodetaint.Register(plugins)
	podsecurity.Register(plugins)
	priority.Register(plugins)
	// 300 s each, as kube-apiserver's --default-not-ready-toleration-seconds
	// and --default-unreachable-toleration-seconds by default.
	defaulttolerationseconds.Register(plugins)
	setdefault.Register(plugins)
	storageobjectinuseprotection.Register(plugins)
	podgroupprotection.Register(plugins)
	resize.Register(plugins)
	runtimeclass.Register(plugins)
	// The certificate plugins and ClusterTrustBundleAttest ask the
	// server's authorizer (the generic initializer's) whether the writer
	// may approve, sign or attest for the signer.
	certapproval.Register(plugins)
	certsigning.Register(plugins)
	ctbattest.Register(plugins)
	certsubjectrestriction.Register(plugins)
	defaultingressclass.Register(plugins)
	podtopologylabels.Register(plugins)
	nodedeclaredfeatures.Register(plugins)
	podresize.Register(plugins)
	policymutating.Register(plugins)
	mutatingwebhook.Register(plugins)
	policyvalidating.Register(plugins)
	validatingwebhook.Register(plugins)
	resourcequota.Register(plugins)
	initializers, err := admissionInitializers(opts, stop)
	if err != nil {
		return nil, fmt.Errorf("apiserver: admission: %w", err)
	}
	// As kube-apiserver: each plugin is timed
	// (apiserver_admission_controller_admission_duration_seconds), and so
	// is each step, admit then validate, of the whole chain
	// (apiserver_admission_step_admission_duration_seconds), with the
	// series kept (metrics.go); the webhook plugins time each webhook
	// themselves (apiserver_admission_webhook_admission_duration_seconds).
	var decorator admission.Decorator = admission.DecoratorFunc(withControllerMetrics)
	if opts.NoMetrics {
		decorator = nil
	}
	chain, err := plugins.NewFromPlugins(names, noAdmissionConfig{}, initializers, decorator)
	if err != nil {
		return nil, fmt.Errorf("apiserver: admission: %w", err)
	}
	if opts.NoMetrics {
		return chain, nil
	}
	return withStepMetrics(chain), nil
}

// NewObjectInterfaces are the schemes the plugins convert and default
// with, and which built-in resources are the same objects in other
// versions (the same storage prefix, as kube-apiserver's
// EquivalentResourceRegistry): a webhook or policy with matchPolicy
// Equivalent on autoscaling/v2 HPAs sees autoscaling/v1 writes too,
// converted to v2. Custom resources are left out: a CRD's other versions
// would need conversion webhooks.
func NewObjectInterfaces(resources []*registry.Resource) admission.ObjectInterfaces {
	prefixes := map[schema.GroupResource]string{}
	for _, r := range resources {
		if r.Custom == nil && r.StoragePrefix != "" {
			prefixes[r.GroupResource()] = r.StoragePrefix
		}
	}
	equivalents := runtime.NewEquivalentResourceRegistryWithIdentity(func(gr schema.GroupResource) string {
		return prefixes[gr] // "": the group and resource
	})
	for _, r := range resources {
		if r.Custom != nil || r.Virtual() {
			continue
		}
		gvr := r.GVK.GroupVersion().WithResource(r.Plural)
		equivalents.RegisterKindFor(gvr, "", r.GVK)
		if r.Status {
			equivalents.RegisterKindFor(gvr, "status", r.GVK)
		}
		for _, sub := range r.ObjectSubresources {
			equivalents.RegisterKindFor(gvr, sub, r.GVK)
		}
		if r.Scale {
			equivalents.RegisterKindFor(gvr, "scale", autoscalingv1.SchemeGroupVersion.WithKind("Scale"))
		}
	}
	ls := legacyscheme.Scheme
	return &admission.RuntimeObjectInterfaces{
		ObjectCreater: ls, ObjectTyper: ls, ObjectDefaulter: ls, ObjectConvertor: ls,
		EquivalentResourceMapper: equivalents,
	}
}

// noAdmissionConfig configures every plugin with its defaults (no
// admission configuration file yet: PodSecurity defaults to privileged
// where a namespace has no labels, ResourceQuota limits nothing by
// default).
type noAdmissionConfig struct{}

func (noAdmissionConfig) ConfigFor(string) (io.Reader, error) { return nil, nil }
