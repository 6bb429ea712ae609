package registry

import (
	"context"
	"fmt"

	"github.com/sqlkube/sqlkube/apiserver/scheme"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	"k8s.io/kubernetes/pkg/apis/admissionregistration"
	"k8s.io/kubernetes/pkg/registry/admissionregistration/mutatingadmissionpolicy"
	"k8s.io/kubernetes/pkg/registry/admissionregistration/mutatingadmissionpolicybinding"
	"k8s.io/kubernetes/pkg/registry/admissionregistration/resolver"
	"k8s.io/kubernetes/pkg/registry/admissionregistration/validatingadmissionpolicy"
	"k8s.io/kubernetes/pkg/registry/admissionregistration/validatingadmissionpolicybinding"
)

// admissionResources are admissionregistration.k8s.io/v1's webhook
// configurations and validating and mutating admission policies with
// their bindings (the admission chain runs them: package admission),
// apiregistration.k8s.io/v1's APIServices (served; the aggregator
// proxies them, package aggregator) and flowcontrol.apiserver.k8s.io/v1's
// flow schemas and priority levels (served and defaulted; requests are
// limited by the in-flight limits, not by them).
func admissionResources(run Running) []*Resource {
	adm, fc := admissionregistrationv1.SchemeGroupVersion, flowcontrolv1.SchemeGroupVersion
	ext := []string{"api-extensions"}
	mutating := resource(adm.WithKind("MutatingWebhookConfiguration"), "mutatingwebhookconfigurations", "mutatingwebhookconfiguration", false, false,
		func() runtime.Object { return &admissionregistrationv1.MutatingWebhookConfiguration{} },
		func() runtime.Object { return &admissionregistrationv1.MutatingWebhookConfigurationList{} })
	validating := resource(adm.WithKind("ValidatingWebhookConfiguration"), "validatingwebhookconfigurations", "validatingwebhookconfiguration", false, false,
		func() runtime.Object { return &admissionregistrationv1.ValidatingWebhookConfiguration{} },
		func() runtime.Object { return &admissionregistrationv1.ValidatingWebhookConfigurationList{} })
	policies := resource(adm.WithKind("ValidatingAdmissionPolicy"), "validatingadmissionpolicies", "validatingadmissionpolicy", false, true,
		func() runtime.Object { return &admissionregistrationv1.ValidatingAdmissionPolicy{} },
		func() runtime.Object { return &admissionregistrationv1.ValidatingAdmissionPolicyList{} })
	// Policies' strategies check that the writer may read the kinds of
	// parameters they name, and find those kinds' resources.
	policyStrategy := validatingadmissionpolicy.NewStrategy(lazyAuthorizer(run), resolver.ResourceResolverFunc(resolveKind(run)))
	policies.Strategy, policies.StatusStrategy = policyStrategy, validatingadmissionpolicy.NewStatusStrategy(policyStrategy)
	bindings := resource(adm.WithKind("ValidatingAdmissionPolicyBinding"), "validatingadmissionpolicybindings", "validatingadmissionpolicybinding", false, false,
		func() runtime.Object { return &admissionregistrationv1.ValidatingAdmissionPolicyBinding{} },
		func() runtime.Object { return &admissionregistrationv1.ValidatingAdmissionPolicyBindingList{} })
	bindings.Strategy = validatingadmissionpolicybinding.NewStrategy(lazyAuthorizer(run), policyGetter{run: run}, resolver.ResourceResolverFunc(resolveKind(run)))
	// Mutating policies (no status) and their bindings, checked as the
	// validating ones are.
	mutatingPolicies := resource(adm.WithKind("MutatingAdmissionPolicy"), "mutatingadmissionpolicies", "mutatingadmissionpolicy", false, false,
		func() runtime.Object { return &admissionregistrationv1.MutatingAdmissionPolicy{} },
		func() runtime.Object { return &admissionregistrationv1.MutatingAdmissionPolicyList{} })
	mutatingPolicies.Strategy = mutatingadmissionpolicy.NewStrategy(lazyAuthorizer(run), resolver.ResourceResolverFunc(resolveKind(run)))
	mutatingBindings := resource(adm.WithKind("MutatingAdmissionPolicyBinding"), "mutatingadmissionpolicybindings", "mutatingadmissionpolicybinding", false, false,
		func() runtime.Object { return &admissionregistrationv1.MutatingAdmissionPolicyBinding{} },
		func() runtime.Object { return &admissionregistrationv1.MutatingAdmissionPolicyBindingList{} })
	mutatingBindings.Strategy = mutatingadmissionpolicybinding.NewStrategy(lazyAuthorizer(run), policyGetter{run: run}, resolver.ResourceResolverFunc(resolveKind(run)))
	apiServices := resource(apiregistrationv1.SchemeGroupVersion.WithKind("APIService"), "apiservices", "apiservice", false, true,
		func() runtime.Object { return &apiregistrationv1.APIService{} }, func() runtime.Object { return &apiregistrationv1.APIServiceList{} })
	// Where and how the aggregator stores them: JSON, group-qualified.
	apiServices.StoragePrefix, apiServices.StorageJSON = "/apiregistration.k8s.io/apiservices", true
	for _, r := range []*Resource{mutating, validating, policies, bindings, mutatingPolicies, mutatingBindings, apiServices} {
		r.Categories = ext
	}
	return []*Resource{
		mutating, validating, policies, bindings, mutatingPolicies, mutatingBindings, apiServices,
		resource(fc.WithKind("FlowSchema"), "flowschemas", "flowschema", false, true,
			func() runtime.Object { return &flowcontrolv1.FlowSchema{} }, func() runtime.Object { return &flowcontrolv1.FlowSchemaList{} }),
		resource(fc.WithKind("PriorityLevelConfiguration"), "prioritylevelconfigurations", "prioritylevelconfiguration", false, true,
			func() runtime.Object { return &flowcontrolv1.PriorityLevelConfiguration{} },
			func() runtime.Object { return &flowcontrolv1.PriorityLevelConfigurationList{} }),
	}
}

// lazyAuthorizer asks the server's authorizer, which is built after the
// resources.
func lazyAuthorizer(run Running) authorizer.Authorizer {
	return authorizer.AuthorizerFunc(func(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		authz := run.Authorizer()
		if authz == nil {
			return authorizer.DecisionNoOpinion, "authorizer not started", nil
		}
		return authz.Authorize(ctx, a)
	})
}

// resolveKind finds the served resource of a kind, as kube-apiserver's
// discovery-based resolver does.
func resolveKind(run Running) func(schema.GroupVersionKind) (schema.GroupVersionResource, error) {
	return func(gvk schema.GroupVersionKind) (schema.GroupVersionResource, error) {
		for _, r := range run.Resources() {
			if r.GVK == gvk {
				return r.GroupVersion().WithResource(r.Plural), nil
			}
		}
		return schema.GroupVersionResource{}, fmt.Errorf("no resource of kind %s is served", gvk)
	}
}

// policyGetter reads validating and mutating admission policies
// (internal version) for the bindings' strategies.
type policyGetter struct{ run Running }

func (g policyGetter) GetValidatingAdmissionPolicy(ctx context.Context, name string) (*admissionregistration.ValidatingAdmissionPolicy, error) {
	client := g.run.Client()
	if client == nil {
		return nil, fmt.Errorf("server not started")
	}
	p, err := client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	in, err := scheme.ToInternal(p)
	if err != nil {
		return nil, err
	}
	return in.(*admissionregistration.ValidatingAdmissionPolicy), nil
}

func (g policyGetter) GetMutatingAdmissionPolicy(ctx context.Context, name string) (*admissionregistration.MutatingAdmissionPolicy, error) {
	client := g.run.Client()
	if client == nil {
		return nil, fmt.Errorf("server not started")
	}
	p, err := client.AdmissionregistrationV1().MutatingAdmissionPolicies().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	in, err := scheme.ToInternal(p)
	if err != nil {
		return nil, err
	}
	return in.(*admissionregistration.MutatingAdmissionPolicy), nil
}

// lazyNamespaces reads namespaces through the server's loopback client,
// which exists once the server has started (Get is all the resource
// claims' strategies call).
type lazyNamespaces struct {
	corev1client.NamespaceInterface
	run Running
}

func (l lazyNamespaces) Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Namespace, error) {
	client := l.run.Client()
	if client == nil {
		return nil, fmt.Errorf("server not started")
	}
	return client.CoreV1().Namespaces().Get(ctx, name, opts)
}
