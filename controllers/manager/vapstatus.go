package manager

import (
	"context"
	"fmt"
	"sync"

	apiextensionsscheme "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset/scheme"
	validatingpolicy "k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/cel/openapi/resolver"
	k8sscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
	"k8s.io/kubernetes/cmd/kube-controller-manager/names"
	"k8s.io/kubernetes/pkg/controller/validatingadmissionpolicystatus"
	"k8s.io/kubernetes/pkg/generated/openapi"
)

// builtinSchemas resolves the built-in types' OpenAPI schemas for the
// ValidatingAdmissionPolicy status controller's type checks. Upstream's
// constructor builds it for each controller manager: some 7 MB of
// definitions, the same in every one, held by each of a host's tenants.
// It is read-only once built, so the process builds it once.
var builtinSchemas = sync.OnceValue(func() *resolver.DefinitionsSchemaResolver {
	return resolver.NewDefinitionsSchemaResolver(openapi.GetOpenAPIDefinitions, k8sscheme.Scheme, apiextensionsscheme.Scheme)
})

// newVAPStatusController is upstream's ValidatingAdmissionPolicy status
// controller (kube-controller-manager's constructor, whose descriptor
// cannot be built from outside its package), its built-in schemas
// shared by the process (builtinSchemas) and combined, as upstream's
// are, with the cluster's own through discovery.
func newVAPStatusController(cctx app.ControllerContext) (app.Controller, error) {
	name := names.ValidatingAdmissionPolicyStatusController
	discovery, err := cctx.ClientBuilder.DiscoveryClient(name)
	if err != nil {
		return nil, fmt.Errorf("discovery client for %s: %w", name, err)
	}
	client, err := cctx.NewClient(name)
	if err != nil {
		return nil, err
	}
	checker := &validatingpolicy.TypeChecker{
		SchemaResolver: builtinSchemas().Combine(&resolver.ClientDiscoveryResolver{Discovery: discovery}),
		RestMapper:     cctx.RESTMapper,
	}
	c, err := validatingadmissionpolicystatus.NewController(
		cctx.InformerFactory.Admissionregistration().V1().ValidatingAdmissionPolicies(),
		client.AdmissionregistrationV1().ValidatingAdmissionPolicies(), checker)
	if err != nil {
		return nil, err
	}
	workers := int(cctx.ComponentConfig.ValidatingAdmissionPolicyStatusController.ConcurrentPolicySyncs)
	return controllerFunc{name: name, run: func(ctx context.Context) { c.Run(ctx, workers) }}, nil
}

// controllerFunc is an app.Controller that runs run.
type controllerFunc struct {
	name string
	run  func(context.Context)
}

func (c controllerFunc) Name() string            { return c.name }
func (c controllerFunc) Run(ctx context.Context) { c.run(ctx) }
