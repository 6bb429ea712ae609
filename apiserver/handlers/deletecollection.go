package handlers

import (
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8sstorage "k8s.io/apiserver/pkg/storage"
	storeerr "k8s.io/apiserver/pkg/storage/errors"
)

// deleteCollection deletes every object the list options select, each as
// a single DELETE with the request's DeleteOptions would (finalizers and
// propagation policy, grace periods, preconditions, dry run), and answers
// the list of what was deleted or marked for deletion. Objects that go
// meanwhile are skipped. Namespaces have no deletecollection (405), as in
// Kubernetes.
func (h *Request) deleteCollection() error {
	if isNamespaces(h.Resource) {
		return h.Fail(apierrors.NewMethodNotSupported(h.Resource.GroupResource(), "deletecollection"))
	}
	_, pred, err := h.listOptions()
	if err != nil {
		return h.Fail(err)
	}
	opts := metav1.DeleteOptions{}
	if err := h.decodeDeleteOptions(&opts); err != nil {
		return h.Fail(err)
	}
	if errs := metav1validation.ValidateDeleteOptions(&opts); len(errs) > 0 {
		return h.Fail(apierrors.NewInvalid(schema.GroupKind{Group: metav1.GroupName, Kind: "DeleteOptions"}, "", errs))
	}
	if err := h.admitDelete(&opts); err != nil {
		return h.Fail(err)
	}
	var pre *k8sstorage.Preconditions
	if opts.Preconditions != nil {
		pre = &k8sstorage.Preconditions{UID: opts.Preconditions.UID, ResourceVersion: opts.Preconditions.ResourceVersion}
	}
	list := h.Resource.NewList()
	if err := h.Store.GetList(h.Ctx, h.Resource.ListKey(h.Info.Namespace), k8sstorage.ListOptions{Predicate: pred, Recursive: true}, list); err != nil {
		return h.Fail(storeerr.InterpretListError(err, h.Resource.GroupResource()))
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return h.Fail(err)
	}
	deleted := make([]runtime.Object, 0, len(items))
	for _, item := range items {
		if ctxDone(h.Ctx) {
			return h.Fail(apierrors.NewTimeoutError("the request was abandoned", 0))
		}
		m, _ := meta.Accessor(item)
		one := h.forObject(m.GetNamespace(), m.GetName())
		if IsDryRun(opts.DryRun) {
			if pre == nil || pre.Check(one.Key(), item) == nil {
				if err := one.validateDelete(h.Ctx, item); err != nil {
					return h.Fail(err)
				}
				deleted = append(deleted, item)
			}
			continue
		}
		out, err := one.GracefulDelete(opts, pre, one.validateDelete)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return h.Fail(err)
		}
		deleted = append(deleted, out)
	}
	if err := meta.SetList(list, deleted); err != nil {
		return h.Fail(err)
	}
	return h.respond(http.StatusOK, list)
}

// forObject is a copy of h addressing one object of its resource.
func (h *Request) forObject(namespace, name string) *Request {
	info := *h.Info
	info.Namespace, info.Name = namespace, name
	one := *h
	one.Info = &info
	return &one
}
