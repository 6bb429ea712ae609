package handlers

import (
	"context"
	"fmt"

	"github.com/sqlkube/sqlkube/apiserver/authz"
	"github.com/sqlkube/sqlkube/apiserver/scheme"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/request"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/informers"
	"k8s.io/kubernetes/plugin/pkg/admission/noderestriction"
)

// nodeRestriction is Kubernetes' NodeRestriction admission plugin: a node
// (system:node:NAME in system:nodes) may create and modify only its own
// Node object (not its taints, owner references or labels outside the
// kubelet's set) and its Lease in kube-node-lease, update the status of
// the pods bound to it, create only mirror pods bound to itself (owned by
// its Node, referencing no other API object), delete only its pods, and
// ask for tokens only for its pods' service accounts. Requests by anyone
// else pass. The plugin works on internal objects (strategy.go converts).
type NodeRestriction struct{ plugin *noderestriction.Plugin }

// newNodeRestriction builds the plugin over factory's listers (pods,
// nodes, service accounts, and the PVCs, PVs and CSI drivers of its
// service-account audience check; request before factory starts) and the
// server's authorizer.
func NewNodeRestriction(factory informers.SharedInformerFactory, a authorizer.Authorizer) (*NodeRestriction, error) {
	p := noderestriction.NewPlugin(authz.NodeIdentifier)
	p.InspectFeatureGates(utilfeature.DefaultFeatureGate)
	p.SetExternalKubeInformerFactory(factory)
	p.SetUnconditionalAuthorizer(a)
	if err := p.ValidateInitialization(); err != nil {
		return nil, fmt.Errorf("apiserver: %w", err)
	}
	return &NodeRestriction{plugin: p}, nil
}

// admitNodeRestriction runs NodeRestriction on one write; the admission
// chain may call it with its own attributes (objects in their internal
// versions). It returns a 403 Forbidden status error to refuse.
func (n *NodeRestriction) admitNodeRestriction(ctx context.Context, attrs admission.Attributes) error {
	if n == nil || !n.plugin.Handles(attrs.GetOperation()) {
		return nil
	}
	return n.plugin.Admit(ctx, attrs, nil)
}

// admitNodeWrite runs NodeRestriction on h's request when a node makes it:
// op is admission.Create (obj the object to store), Update (obj and the
// stored old) or Delete (neither). Objects are converted to their
// internal versions; a type Kubernetes has none for (a custom resource)
// is passed as it is, which the plugin ignores.
func (h *Request) AdmitNodeWrite(op admission.Operation, obj, old runtime.Object, name string) error {
	u, ok := request.UserFrom(h.Ctx)
	if !ok {
		return nil
	}
	if _, node := authz.IsNode(u); !node || h.API.NodeRestriction == nil {
		return nil
	}
	internal := func(o runtime.Object) runtime.Object {
		if o == nil {
			return nil
		}
		if in, err := scheme.ToInternal(o); err == nil {
			return in
		}
		return o
	}
	attrs := admission.NewAttributesRecord(internal(obj), internal(old), h.Resource.GVK, h.Info.Namespace, name,
		h.Resource.GroupVersion().WithResource(h.Resource.Plural), h.Info.Subresource, op, nil, false, u)
	return h.API.NodeRestriction.admitNodeRestriction(h.Ctx, attrs)
}
