package subresources

import (
	"github.com/sqlkube/sqlkube/apiserver/handlers"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Table is the core group's subresources served by their own handlers:
// pods' binding, eviction and what their kubelet serves, the proxies of
// pods, services and nodes, service accounts' token and namespaces'
// finalize. (Pods' ephemeralcontainers and resize are the pod itself, as
// status is: registry.Resource.ObjectSubresources.)
func Table() handlers.Subresources {
	return handlers.Subresources{
		{Resource: "pods"}: {
			{Name: "binding", Kind: "Binding", Verbs: metav1.Verbs{"create"}, Serve: bind},
			{Name: "eviction", Kind: "Eviction", GroupVersion: schema.GroupVersion{Group: "policy", Version: "v1"}, Verbs: metav1.Verbs{"create"}, Serve: evict},
			// kubelet.go: served by the pod's kubelet.
			{Name: "attach", Kind: "PodAttachOptions", Verbs: metav1.Verbs{"create", "get"}, Serve: podAttach},
			{Name: "exec", Kind: "PodExecOptions", Verbs: metav1.Verbs{"create", "get"}, Serve: podExec},
			{Name: "log", Kind: "Pod", Verbs: metav1.Verbs{"get"}, Serve: podLog},
			{Name: "portforward", Kind: "PodPortForwardOptions", Verbs: metav1.Verbs{"create", "get"}, Serve: podPortForward},
			// proxy.go: proxied to the pod.
			{Name: "proxy", Kind: "PodProxyOptions", Verbs: proxyVerbs, Methods: proxyMethods, Serve: podProxy},
		},
		{Resource: "services"}: {
			{Name: "proxy", Kind: "ServiceProxyOptions", Verbs: proxyVerbs, Methods: proxyMethods, Serve: serviceProxy},
		},
		{Resource: "nodes"}: {
			{Name: "proxy", Kind: "NodeProxyOptions", Verbs: proxyVerbs, Methods: proxyMethods, Serve: nodeProxy},
		},
		{Resource: "serviceaccounts"}: {
			{Name: "token", Kind: "TokenRequest", GroupVersion: schema.GroupVersion{Group: "authentication.k8s.io", Version: "v1"}, Verbs: metav1.Verbs{"create"}, Serve: createToken},
		},
		{Resource: "namespaces"}: {
			{Name: "finalize", Kind: "Namespace", Verbs: metav1.Verbs{"update"}, Serve: (*handlers.Request).FinalizeNamespace},
		},
	}
}

// proxyVerbs are the proxies' verbs as discovery lists them (HEAD is a
// get; OPTIONS has no verb).
var proxyVerbs = metav1.Verbs{"create", "delete", "get", "patch", "update"}
