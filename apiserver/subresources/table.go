package subresources

import (
	"github.com/sqlkube/sqlkube/apiserver/handlers"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// SubresourceTable is the core group's subresources served by their own
// handlers: pods' binding, eviction and what their kubelet serves, nodes'
// proxy, service accounts' token and namespaces' finalize.
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
		},
		{Resource: "nodes"}: {
			{Name: "proxy", Kind: "NodeProxyOptions", Verbs: metav1.Verbs{"create", "delete", "get", "patch", "update"}, Serve: nodeProxy},
		},
		{Resource: "serviceaccounts"}: {
			{Name: "token", Kind: "TokenRequest", GroupVersion: schema.GroupVersion{Group: "authentication.k8s.io", Version: "v1"}, Verbs: metav1.Verbs{"create"}, Serve: createToken},
		},
		{Resource: "namespaces"}: {
			{Name: "finalize", Kind: "Namespace", Verbs: metav1.Verbs{"update"}, Serve: (*handlers.Request).FinalizeNamespace},
		},
	}
}
