package authz

import (
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/informers"
	"k8s.io/kubernetes/pkg/auth/nodeidentifier"
	"k8s.io/kubernetes/plugin/pkg/auth/authorizer/node"
	"k8s.io/kubernetes/plugin/pkg/auth/authorizer/rbac/bootstrappolicy"
)

// NodeIdentifier recognises nodes: users system:node:NAME in the group
// system:nodes (a name without the group is not a node).
var NodeIdentifier = nodeidentifier.NewDefaultNodeIdentifier()

// IsNode reports whether u is a node, and which.
func IsNode(u user.Info) (string, bool) { return NodeIdentifier.NodeIdentity(u) }

// newNodeAuthorizer builds Kubernetes' Node authorizer: a node may read
// only the pods bound to it and the secrets, config maps, volumes and
// service accounts those pods use, its own Node object and Lease, the
// resource slices and pod certificate requests of its node, and what the
// bootstrap policy's node rules allow every node; anything else has no
// opinion (RBAC decides). What is bound to what comes from a graph fed by
// the pods, persistent volumes, volume attachments, resource slices and
// pod certificate requests informers of factory (request before factory
// starts), as kube-apiserver feeds it.
func newNodeAuthorizer(factory informers.SharedInformerFactory) *node.NodeAuthorizer {
	graph := node.NewGraph()
	core := factory.Core().V1()
	node.AddGraphEventHandlers(graph, core.Nodes(), core.Pods(), core.PersistentVolumes(), factory.Storage().V1().VolumeAttachments(),
		factory.Resource().V1().ResourceSlices(), factory.Certificates().V1().PodCertificateRequests())
	return node.NewAuthorizer(graph, NodeIdentifier, bootstrappolicy.NodeRules())
}
