package handlers

import (
	"errors"
	"net/http"

	"github.com/sqlkube/sqlkube/apiserver/registry"
	"github.com/sqlkube/sqlkube/apiserver/responses"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apiserver/pkg/admission"
	k8sstorage "k8s.io/apiserver/pkg/storage"
	storeerr "k8s.io/apiserver/pkg/storage/errors"
)

// errCreateInstead ends an update's GuaranteedUpdate attempt that found
// no object where the write may create one: the caller then creates it
// through createObject.
var errCreateInstead = errors.New("handlers: the object does not exist; create it")

// createObject is the one way an object comes into being: POST, a PUT of
// a missing object where the resource allows create-on-update, and
// server-side apply of a missing object all end here, so each gets the
// same steps: the request's namespace, generateName, managedFields (an
// apply brings its own), defaulting and mutating admission, service
// addresses, the strategy's PrepareForCreate and validation, validating
// admission, the node restriction, then the store. A dry run runs them
// all, claims nothing and stores nothing. obj has been decoded into the
// resource's served version; its name and namespace have been checked
// against the URL's.
func (h *Request) createObject(obj runtime.Object) (runtime.Object, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	if h.Resource.Namespaced {
		m.SetNamespace(h.Info.Namespace)
	} else {
		m.SetNamespace("")
	}
	if m.GetName() == "" && m.GetGenerateName() != "" {
		m.SetName(m.GetGenerateName() + utilrand.String(5))
	}
	h.Echo.Set(responses.CreatedNameKey, m.GetName())
	if !h.applying {
		obj = h.trackManagedFields(h.Resource.New(), obj)
	}
	obj, finish, err := h.prepareCreate(obj)
	if err != nil {
		return nil, err
	}
	stored := false
	defer func() { finish(stored) }()
	m, _ = meta.Accessor(obj)
	if err := h.AdmitNodeWrite(admission.Create, obj, nil, m.GetName()); err != nil {
		return nil, err
	}
	key := h.Resource.Key(m.GetNamespace(), m.GetName())
	if h.adm.dryRun {
		// Nothing is written: answer as the create would, without a
		// resourceVersion, unless the name is taken.
		if err := h.Store.Get(h.Ctx, key, k8sstorage.GetOptions{}, h.Resource.New()); err == nil {
			return nil, apierrors.NewAlreadyExists(h.Resource.GroupResource(), m.GetName())
		}
		return obj, nil
	}
	out := h.Resource.New()
	if err := h.Store.Create(h.Ctx, key, obj, out, 0); err != nil {
		return nil, storeerr.InterpretCreateError(err, h.Resource.GroupResource(), m.GetName())
	}
	stored = true
	return out, nil
}

// allowCreateOnUpdate reports whether a PUT of a missing object creates
// it, as the resource's Kubernetes strategy says (Endpoints, Leases,
// Events, RBAC objects...); resources without one do not.
func (h *Request) allowCreateOnUpdate() bool {
	if h.Info.Subresource != "" {
		return false
	}
	st := registry.UpdateStrategy(h.Resource, "")
	return st != nil && st.AllowCreateOnUpdate(h.Ctx)
}

// upsert runs an update that may create: tryUpdate inside GuaranteedUpdate
// on the stored object, or, when none is stored and create is allowed,
// createObject on what newObj makes of an empty object. A create that
// loses a race to another writer is retried as an update. It answers
// 201 for a create, 200 for an update.
func (h *Request) upsert(allowCreate bool, newObj func() (runtime.Object, error),
	tryUpdate func(existing runtime.Object) (runtime.Object, *uint64, error)) error {
	if h.adm.dryRun {
		// Nothing is written: the update (or create) runs on the object
		// as it is now.
		existing := h.Resource.New()
		if err := h.Store.Get(h.Ctx, h.Key(), k8sstorage.GetOptions{IgnoreNotFound: allowCreate}, existing); err != nil {
			return h.Fail(storeerr.InterpretGetError(err, h.Resource.GroupResource(), h.Info.Name))
		}
		if m, err := meta.Accessor(existing); err == nil && m.GetResourceVersion() == "" {
			obj, err := newObj()
			if err == nil {
				obj, err = h.createObject(obj)
			}
			if err != nil {
				return h.Fail(err)
			}
			return h.respond(http.StatusCreated, obj)
		}
		updated, _, err := tryUpdate(existing)
		if err != nil {
			return h.Fail(err)
		}
		return h.respond(http.StatusOK, updated)
	}
	for attempt := 0; ; attempt++ {
		out := h.Resource.New()
		err := h.Store.GuaranteedUpdate(h.Ctx, h.Key(), out, allowCreate, nil, func(existing runtime.Object, _ k8sstorage.ResponseMeta) (runtime.Object, *uint64, error) {
			if m, err := meta.Accessor(existing); err == nil && m.GetResourceVersion() == "" {
				return nil, nil, errCreateInstead
			}
			return tryUpdate(existing)
		}, nil)
		if errors.Is(err, errCreateInstead) {
			obj, err := newObj()
			if err != nil {
				return h.Fail(err)
			}
			created, err := h.createObject(obj)
			if apierrors.IsAlreadyExists(err) && attempt == 0 {
				continue
			}
			if err != nil {
				return h.Fail(err)
			}
			return h.respond(http.StatusCreated, created)
		}
		if err != nil {
			return h.Fail(storeerr.InterpretUpdateError(err, h.Resource.GroupResource(), h.Info.Name))
		}
		if out, err = h.finishDeletion(out); err != nil {
			return h.Fail(err)
		}
		return h.respond(http.StatusOK, out)
	}
}
