package registry

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	clientset "k8s.io/client-go/kubernetes"

	"github.com/sqlkube/sqlkube/apiserver/authz"
)

// Running is what some resources need of the running server, which is
// built after the resource table: their strategies and REST handlers ask
// for it at request time. Before the server has started, Authorizer,
// Client and TokenReviewer return nil.
type Running interface {
	// Authorizer is the server's authorizer.
	Authorizer() *authz.Authorizer
	// Client is a clientset over the server's loopback.
	Client() clientset.Interface
	// TokenReviewer authenticates TokenReviews' tokens (nil without any
	// token authenticator); APIAudiences are the audiences the API
	// accepts.
	TokenReviewer() authenticator.Request
	APIAudiences() authenticator.Audiences
	// Resources are the served resources, built-in and custom.
	Resources() []*Resource
	// ComponentStatuses reports whether the storage answers.
	ComponentStatuses(ctx context.Context) *corev1.ComponentStatusList
}
