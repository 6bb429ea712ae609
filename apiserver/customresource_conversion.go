package apiserver

import (
	"errors"
	"fmt"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/sqlkube/sqlkube/apiserver/admission"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/conversion"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/util/webhook"
	"k8s.io/client-go/rest"
)

// Custom resources of a CRD whose spec.conversion.strategy is Webhook
// are converted by apiextensions-apiserver's webhook converter (a
// ConversionReview v1 or v1beta1, whichever the CRD lists first that
// both speak) wherever versions meet: the storage codec writes the
// storage version and reads each served version, so reads, writes, lists
// and watches at any version go through it, as in kube-apiserver. The
// webhook is reached by URL or through its service (one of the
// service's ready endpoints, as admission webhooks), over TLS checked
// against its caBundle, within conversionTimeout.

// conversionTimeout bounds one call to a conversion webhook.
const conversionTimeout = 10 * time.Second

// crdConverters makes the converters of CRDs. It may be used before the
// server's informers exist: service references resolve once they do.
type crdConverters struct {
	factory *conversion.CRConverterFactory
	// services is set once the endpoint resolver exists.
	services atomic.Pointer[admission.EndpointResolver]
}

func newCRDConverters() (*crdConverters, error) {
	c := &crdConverters{}
	factory, err := conversion.NewCRConverterFactory(lateServiceResolver{c}, withTimeout(conversionTimeout))
	if err != nil {
		return nil, err
	}
	c.factory = factory
	return c, nil
}

// converter is crd's converter for custom resources (nil for strategy
// None: only apiVersion changes, which the storage codec does itself).
func (c *crdConverters) converter(crd *apiextensionsv1.CustomResourceDefinition) (runtime.ObjectConvertor, error) {
	if c == nil || crd.Spec.Conversion == nil || crd.Spec.Conversion.Strategy != apiextensionsv1.WebhookConverter {
		return nil, nil
	}
	if crd.Spec.Conversion.Webhook == nil || crd.Spec.Conversion.Webhook.ClientConfig == nil {
		return nil, fmt.Errorf("%s: conversion strategy Webhook without a webhook client configuration", crd.Name)
	}
	safe, _, err := c.factory.NewConverter(crd)
	if err != nil {
		return nil, fmt.Errorf("%s: conversion webhook: %w", crd.Name, err)
	}
	return safe, nil
}

// lateServiceResolver resolves services with the server's endpoint
// resolver once it exists.
type lateServiceResolver struct{ c *crdConverters }

var errNoServiceResolver = errors.New("apiserver: services cannot be resolved yet")

func (r lateServiceResolver) ResolveEndpoint(namespace, name string, port int32) (*url.URL, error) {
	services := r.c.services.Load()
	if services == nil {
		return nil, errNoServiceResolver
	}
	return services.ResolveEndpoint(namespace, name, port)
}

// withTimeout bounds the webhook clients' requests.
func withTimeout(d time.Duration) webhook.AuthenticationInfoResolverWrapper {
	return func(inner webhook.AuthenticationInfoResolver) webhook.AuthenticationInfoResolver {
		bound := func(cfg *rest.Config, err error) (*rest.Config, error) {
			if err != nil {
				return nil, err
			}
			cfg = rest.CopyConfig(cfg)
			cfg.Timeout = d
			return cfg, nil
		}
		return &webhook.AuthenticationInfoResolverDelegator{
			ClientConfigForFunc: func(hostPort string) (*rest.Config, error) { return bound(inner.ClientConfigFor(hostPort)) },
			ClientConfigForServiceFunc: func(name, namespace string, port int) (*rest.Config, error) {
				return bound(inner.ClientConfigForService(name, namespace, port))
			},
		}
	}
}
