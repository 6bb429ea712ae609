package registry

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/registry/rest"
)

// Resource is one registry entry: a served resource, how it is stored and
// what its selectors see.
type Resource struct {
	GVK        schema.GroupVersionKind
	Plural     string
	Singular   string
	ShortNames []string
	Categories []string
	Namespaced bool
	New        func() runtime.Object
	NewList    func() runtime.Object
	// StoragePrefix is the resource's folder under /registry, as
	// kube-apiserver names it ("/pods", "/minions", "/services/specs",
	// "/deployments"...).
	StoragePrefix string
	// StorageVersion, when set, is the version objects are stored in if
	// it is not the served one (events.k8s.io/v1 events are stored as
	// core/v1 events); conversion goes through Kubernetes' internal types.
	StorageVersion *schema.GroupVersion
	// StorageJSON stores objects as JSON instead of protobuf, as
	// kube-apiserver stores APIServices (and custom resources).
	StorageJSON bool
	// Fields returns the fields a field selector may name besides
	// metadata.name and metadata.namespace (e.g. spec.nodeName for pods).
	Fields func(obj runtime.Object) fields.Set
	// PrepareForCreate sets what the server owns on a new object (the
	// initial status, say).
	PrepareForCreate func(obj runtime.Object)
	// Scale: the resource has a scale subresource (spec.replicas).
	Scale bool
	// Status: the resource has a status subresource; updates of the main
	// resource keep the stored status and status updates keep the rest.
	Status bool
	// Approval: the resource has an approval subresource (CSRs), which
	// changes only the status' conditions.
	Approval bool
	// ObjectSubresources are more subresources that, like status, read
	// and write the object itself, each through an update strategy of
	// its own (subresourceStrategies): pods' ephemeralcontainers and
	// resize. Their verbs are get, update and patch.
	ObjectSubresources []string
	// Admit defaults and validates an object about to be stored (old is
	// nil on create, the stored object on update); it returns an API
	// Status error (422 Invalid, say) to refuse the write.
	Admit func(ctx context.Context, obj, old runtime.Object) error
	// DeletionFinalizer, if set, is added to an object when its deletion
	// starts, so a controller cleans up before it goes (as
	// customresourcecleanup.apiextensions.k8s.io for CRDs).
	DeletionFinalizer string
	// Custom is set on the resources a CustomResourceDefinition defines
	// (custom.go): unstructured objects with their own storage,
	// schema, table columns and scale paths.
	Custom *CustomResource
	// CreateOnly, when set, makes the resource virtual: nothing is stored
	// (no storage, no watch cache, NewList may be nil), create is its only
	// verb and the REST handler this function makes answers it (the
	// access reviews, virtual.go); any other verb is 405.
	CreateOnly func() rest.Creater
	// Computed, when set, also makes the resource virtual: get and list
	// (its only verbs, as discovery says) answer with the list this
	// function computes at request time (componentstatuses); any other
	// verb is 405.
	Computed func(ctx context.Context) (runtime.Object, error)
	// Strategy and StatusStrategy, when set, are the resource's Kubernetes
	// strategies where they need the running server (an authorizer, a
	// client), in place of its entries in strategies and
	// statusStrategies.
	Strategy       Strategy
	StatusStrategy rest.RESTUpdateStrategy
}

// Virtual reports whether nothing of the resource is stored.
func (r *Resource) Virtual() bool { return r.CreateOnly != nil || r.Computed != nil }

// ObjectSubresource reports whether name is one of r's subresources that
// read and write the object itself: status, approval or one of
// ObjectSubresources.
func (r *Resource) ObjectSubresource(name string) bool {
	return (name == "status" && r.Status) || (name == "approval" && r.Approval) || slices.Contains(r.ObjectSubresources, name)
}

// GroupResource returns the resource's group and plural.
func (r *Resource) GroupResource() schema.GroupResource {
	return schema.GroupResource{Group: r.GVK.Group, Resource: r.Plural}
}

// GroupVersion returns the version the resource is served in.
func (r *Resource) GroupVersion() schema.GroupVersion { return r.GVK.GroupVersion() }

// Attrs are the labels and fields selectors match on.
func (r *Resource) Attrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, nil, err
	}
	f := fields.Set{"metadata.name": m.GetName()}
	if r.Namespaced {
		f["metadata.namespace"] = m.GetNamespace()
	}
	if r.Fields != nil {
		for k, v := range r.Fields(obj) {
			f[k] = v
		}
	}
	return m.GetLabels(), f, nil
}

// Key is the object's storage key below /registry.
func (r *Resource) Key(namespace, name string) string {
	if r.Namespaced {
		return r.StoragePrefix + "/" + namespace + "/" + name
	}
	return r.StoragePrefix + "/" + name
}

// ListKey is the storage prefix of a namespace's objects, or of all.
func (r *Resource) ListKey(namespace string) string {
	if r.Namespaced && namespace != "" {
		return r.StoragePrefix + "/" + namespace + "/"
	}
	return r.StoragePrefix + "/"
}

// ObjectKey returns the storage key of an object (for the watch cache).
func (r *Resource) ObjectKey(obj runtime.Object) (string, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return "", err
	}
	if r.Namespaced && m.GetNamespace() == "" {
		return "", fmt.Errorf("%s %q has no namespace", r.Singular, m.GetName())
	}
	return r.Key(m.GetNamespace(), m.GetName()), nil
}

// Builtin are the built-in resources, in discovery's order.
func Builtin(run Running) []*Resource {
	return slices.Concat(coreResources(), storageResources(), workloadResources(run), groupResources(), eventResources(),
		storageGroupResources(), clusterResources(run), admissionResources(run), certificateResources(run), reviewResources(run),
		storageMigrationResources())
}

// Registry holds the served resources by group, version and plural. The
// built-in resources are fixed; the resources of CustomResourceDefinitions
// come and go (Add, Remove), so every method is safe for concurrent use.
type Registry struct {
	mu        sync.RWMutex
	resources []*Resource
	byGVR     map[schema.GroupVersionResource]*Resource
	// generation counts the changes (Add, Remove).
	generation atomic.Uint64
}

// NewRegistry indexes resources.
func NewRegistry(resources ...*Resource) *Registry {
	reg := &Registry{byGVR: map[schema.GroupVersionResource]*Resource{}}
	for _, r := range resources {
		reg.resources = append(reg.resources, r)
		reg.byGVR[r.GVK.GroupVersion().WithResource(r.Plural)] = r
	}
	return reg
}

// Lookup finds a resource.
func (reg *Registry) Lookup(gvr schema.GroupVersionResource) (*Resource, bool) {
	reg.mu.RLock()
	defer reg.mu.RUnlock()
	r, ok := reg.byGVR[gvr]
	return r, ok
}

// Resources returns every resource, in registration order (a copy).
func (reg *Registry) Resources() []*Resource {
	reg.mu.RLock()
	defer reg.mu.RUnlock()
	return slices.Clone(reg.resources)
}

// Add registers r, replacing a resource of the same group, version and
// plural (which it returns, or nil).
func (reg *Registry) Add(r *Resource) *Resource {
	reg.mu.Lock()
	defer reg.mu.Unlock()
	gvr := r.GVK.GroupVersion().WithResource(r.Plural)
	old := reg.byGVR[gvr]
	reg.byGVR[gvr] = r
	if i := slices.Index(reg.resources, old); old != nil && i >= 0 {
		reg.resources[i] = r
	} else {
		reg.resources = append(reg.resources, r)
	}
	reg.generation.Add(1)
	return old
}

// Remove unregisters r if it is still the resource served at its group,
// version and plural; it reports whether it was.
func (reg *Registry) Remove(r *Resource) bool {
	reg.mu.Lock()
	defer reg.mu.Unlock()
	gvr := r.GVK.GroupVersion().WithResource(r.Plural)
	if reg.byGVR[gvr] != r {
		return false
	}
	delete(reg.byGVR, gvr)
	reg.resources = slices.DeleteFunc(reg.resources, func(x *Resource) bool { return x == r })
	reg.generation.Add(1)
	return true
}

// Generation changes whenever the served resources do (Add, Remove); a
// reader that reads it first and the resources then sees, at the next
// change, a generation it has not seen.
func (reg *Registry) Generation() uint64 { return reg.generation.Load() }

// GroupVersions returns the served group-versions, core first, then groups
// by name.
func (reg *Registry) GroupVersions() []schema.GroupVersion {
	seen := map[schema.GroupVersion]bool{}
	var gvs []schema.GroupVersion
	for _, r := range reg.Resources() {
		if gv := r.GroupVersion(); !seen[gv] {
			seen[gv] = true
			gvs = append(gvs, gv)
		}
	}
	sort.SliceStable(gvs, func(i, j int) bool {
		if (gvs[i].Group == "") != (gvs[j].Group == "") {
			return gvs[i].Group == ""
		}
		return gvs[i].Group < gvs[j].Group
	})
	return gvs
}
