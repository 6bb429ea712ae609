package authn

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	"k8s.io/kubernetes/plugin/pkg/auth/authenticator/token/bootstrap"
)

// StartBootstrapTokens watches kube-system's bootstrap-token secrets
// (type bootstrap.kubernetes.io/token, as `sqlkube token create` and
// kubeadm write them) and returns Kubernetes' bootstrap token
// authenticator over them: a token ID.SECRET authenticates as
// system:bootstrap:ID in system:bootstrappers plus the secret's
// auth-extra-groups, only while the secret allows authentication
// (usage-bootstrap-authentication) and has not expired. stop ends the
// watch; ready reports whether it has listed the secrets.
func StartBootstrapTokens(client kubernetes.Interface) (tokens authenticator.Token, stop func(), ready func() bool) {
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithNamespace(metav1.NamespaceSystem),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("type", string(bootstrapapi.SecretTypeBootstrapToken)).String()
		}))
	lister := factory.Core().V1().Secrets().Lister().Secrets(metav1.NamespaceSystem)
	done := make(chan struct{})
	factory.Start(done)
	stop = func() {
		close(done)
		factory.Shutdown()
	}
	ready = func() bool {
		now := make(chan struct{})
		close(now)
		for _, synced := range factory.WaitForCacheSync(now) {
			if !synced {
				return false
			}
		}
		return true
	}
	return bootstrap.NewTokenAuthenticator(lister), stop, ready
}
