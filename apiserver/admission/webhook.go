package admission

import (
	"net/url"
	"time"

	"go.opentelemetry.io/otel/trace/noop"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/admission"
	genericadmissioninitializer "k8s.io/apiserver/pkg/admission/initializer"
	apiservercompatibility "k8s.io/apiserver/pkg/util/compatibility"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/apiserver/pkg/util/proxy"
	"k8s.io/apiserver/pkg/util/webhook"
	cacheddiscovery "k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/restmapper"
	controlplaneadmission "k8s.io/kubernetes/pkg/controlplane/apiserver/admission"
)

// Admission webhooks and policies are Kubernetes' own plugins
// (MutatingAdmissionPolicy, MutatingAdmissionWebhook,
// ValidatingAdmissionPolicy, ValidatingAdmissionWebhook), initialized as
// kube-apiserver initializes them: the generic initializer with the
// loopback client, a dynamic client and a discovery REST mapper (reset
// every 30s, and on a kind it does not know); the webhook initializer
// with an authentication-info resolver and a service resolver; the
// control plane's initializer with the quota configuration and the
// resources expression-based admission leaves alone (TokenReviews,
// SubjectAccessReviews, ...). Mutating policies' patches are applied
// with type converters made of the server's own /openapi/v3 documents,
// read through the loopback client, as kube-apiserver's plugin reads its
// own.
//
// A webhook's service reference resolves to one of the service's ready
// endpoints (its EndpointSlices), as kube-apiserver does with
// --enable-aggregator-routing: sqlkube runs no service proxy, so cluster
// IPs are not routed. The TLS server name is the service's DNS name
// (<name>.<namespace>.svc), checked against caBundle.

// admissionInitializers are the plugin initializers, in kube-apiserver's
// order. Call it before the informer factory starts (it requests
// informers and indexers).
func admissionInitializers(opts ChainOptions, stop <-chan struct{}) (admission.PluginInitializers, error) {
	client := opts.Client
	dynamicClient, err := dynamic.NewForConfig(opts.Loopback)
	if err != nil {
		return nil, err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(cacheddiscovery.NewMemCacheClient(client.Discovery()))
	go wait.Until(mapper.Reset, 30*time.Second, stop)
	services, err := NewEndpointResolver(opts.Informers)
	if err != nil {
		return nil, err
	}
	controlplane := controlplaneadmission.Config{LoopbackClientConfig: opts.Loopback, ExternalInformers: opts.Informers}
	// No proxy transport, no egress selector: webhooks are dialled
	// directly.
	specific, err := controlplane.New(nil, nil, services, noop.NewTracerProvider())
	if err != nil {
		return nil, err
	}
	if opts.OpenAPIGeneration != nil {
		client = openAPIPathsClient(client, opts.OpenAPIGeneration)
	}
	generic := genericadmissioninitializer.New(client, dynamicClient, opts.Informers, opts.Authorizer, utilfeature.DefaultFeatureGate,
		// PodSecurity reads the effective version (its policy defaults).
		apiservercompatibility.DefaultBuildEffectiveVersion(), stop, mapper)
	return append(admission.PluginInitializers{generic}, specific...), nil
}

// EndpointResolver resolves a service to one of its ready
// endpoints (kube-aggregator's endpoint resolver).
type EndpointResolver struct {
	services listersv1.ServiceLister
	slices   proxy.EndpointSliceGetter
}

var _ webhook.ServiceResolver = EndpointResolver{}

// NewEndpointResolver resolves over factory's services and endpoint
// slices (requested here: call it before the factory starts).
func NewEndpointResolver(factory informers.SharedInformerFactory) (EndpointResolver, error) {
	slices, err := proxy.NewEndpointSliceIndexerGetter(factory.Discovery().V1().EndpointSlices())
	if err != nil {
		return EndpointResolver{}, err
	}
	return EndpointResolver{services: factory.Core().V1().Services().Lister(), slices: slices}, nil
}

// ResolveEndpoint is the URL of one of the service's ready endpoints.
func (r EndpointResolver) ResolveEndpoint(namespace, name string, port int32) (*url.URL, error) {
	return proxy.ResolveEndpoint(r.services, r.slices, namespace, name, port)
}
