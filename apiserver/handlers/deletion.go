package handlers

import (
	"errors"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8sstorage "k8s.io/apiserver/pkg/storage"
	storeerr "k8s.io/apiserver/pkg/storage/errors"
)

// errDeleteNow tells the deletion's GuaranteedUpdate that the object can
// go at once (no finalizers, no grace period).
var errDeleteNow = errors.New("apiserver: delete now")

// gracefulDelete deletes as Kubernetes does: the propagation policy becomes
// a finalizer (orphan, foregroundDeletion) for the garbage collector;
// an object with finalizers, or a pod bound to a node with a grace period,
// gets deletionTimestamp (and deletionGracePeriodSeconds) and stays until
// its finalizers are removed or its node agent deletes it with grace 0;
// anything else is removed at once. It returns the object as stored or as
// deleted. validate (nil: none) admits the deletion of the current object
// (validating delete admission) right before it is written, as
// kube-apiserver's store does.
func (h *Request) GracefulDelete(opts metav1.DeleteOptions, pre *k8sstorage.Preconditions, validate k8sstorage.ValidateObjectFunc) (runtime.Object, error) {
	if validate == nil {
		validate = k8sstorage.ValidateAllObjectFunc
	}
	out := h.Resource.New()
	err := h.Store.GuaranteedUpdate(h.Ctx, h.Key(), out, false, pre, func(existing runtime.Object, _ k8sstorage.ResponseMeta) (runtime.Object, *uint64, error) {
		m, err := meta.Accessor(existing)
		if err != nil {
			return nil, nil, err
		}
		finalizers := slices.Clone(m.GetFinalizers())
		if h.Resource.DeletionFinalizer != "" && m.GetDeletionTimestamp() == nil {
			finalizers = withFinalizer(finalizers, h.Resource.DeletionFinalizer)
		}
		switch policy := propagation(opts); policy {
		case metav1.DeletePropagationOrphan:
			finalizers = withFinalizer(without(finalizers, metav1.FinalizerDeleteDependents), metav1.FinalizerOrphanDependents)
		case metav1.DeletePropagationForeground:
			finalizers = withFinalizer(without(finalizers, metav1.FinalizerOrphanDependents), metav1.FinalizerDeleteDependents)
		}
		grace := h.gracePeriod(existing, opts)
		if len(finalizers) == 0 && grace == 0 && !pendingSpecFinalizers(existing) {
			return nil, nil, errDeleteNow // validated by Delete
		}
		if err := validate(h.Ctx, existing); err != nil {
			return nil, nil, err
		}
		if m.GetDeletionTimestamp() != nil {
			// Already being deleted: a shorter grace period may move the
			// deadline earlier, nothing else changes (as upstream).
			if cur := m.GetDeletionGracePeriodSeconds(); cur != nil && grace < *cur {
				updated := existing.DeepCopyObject()
				um, _ := meta.Accessor(updated)
				now := metav1.NewTime(time.Now().Add(time.Duration(grace) * time.Second))
				um.SetDeletionTimestamp(&now)
				um.SetDeletionGracePeriodSeconds(&grace)
				return updated, nil, nil
			}
			if slices.Equal(finalizers, m.GetFinalizers()) {
				return existing, nil, nil
			}
		}
		updated := existing.DeepCopyObject()
		um, _ := meta.Accessor(updated)
		um.SetFinalizers(finalizers)
		if um.GetDeletionTimestamp() == nil {
			now := metav1.NewTime(time.Now().Add(time.Duration(grace) * time.Second).Truncate(time.Second))
			um.SetDeletionTimestamp(&now)
			um.SetDeletionGracePeriodSeconds(&grace)
			// Its deletion starting is a change its controllers act on
			// (they stop), so its generation moves, once, as
			// kube-apiserver's does (pods' too, since 1.35).
			if g := um.GetGeneration(); g > 0 {
				um.SetGeneration(g + 1)
			}
		}
		markTerminating(updated)
		return updated, nil, nil
	}, nil)
	if errors.Is(err, errDeleteNow) {
		deleted := h.Resource.New()
		if err := h.Store.Delete(h.Ctx, h.Key(), deleted, pre, validate, nil, k8sstorage.DeleteOptions{}); err != nil {
			return nil, storeerr.InterpretDeleteError(err, h.Resource.GroupResource(), h.Info.Name)
		}
		h.releaseService(deleted)
		return deleted, nil
	}
	if err != nil {
		return nil, storeerr.InterpretDeleteError(err, h.Resource.GroupResource(), h.Info.Name)
	}
	return out, nil
}

// propagation is the request's policy; Background by default.
func propagation(opts metav1.DeleteOptions) metav1.DeletionPropagation {
	if opts.PropagationPolicy != nil {
		return *opts.PropagationPolicy
	}
	if opts.OrphanDependents != nil && *opts.OrphanDependents {
		return metav1.DeletePropagationOrphan
	}
	return metav1.DeletePropagationBackground
}

// gracePeriod is how long a deletion waits: only pods bound to a node wait
// (for their node agent to stop them), by the request's grace period or
// the pod's terminationGracePeriodSeconds (default 30).
func (h *Request) gracePeriod(obj runtime.Object, opts metav1.DeleteOptions) int64 {
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.Spec.NodeName == "" || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return 0
	}
	if opts.GracePeriodSeconds != nil {
		return max(*opts.GracePeriodSeconds, 0)
	}
	if pod.Spec.TerminationGracePeriodSeconds != nil {
		return max(*pod.Spec.TerminationGracePeriodSeconds, 0)
	}
	return 30
}

// finishDeletion removes an object that is being deleted once its last
// finalizer is gone (after an update or patch removed it).
func (h *Request) finishDeletion(obj runtime.Object) (runtime.Object, error) {
	m, err := meta.Accessor(obj)
	if err != nil || m.GetDeletionTimestamp() == nil || len(m.GetFinalizers()) > 0 || pendingSpecFinalizers(obj) {
		return obj, err
	}
	if g := m.GetDeletionGracePeriodSeconds(); g != nil && *g > 0 {
		return obj, nil // a pod still in its grace period: its node agent deletes it
	}
	rv := m.GetResourceVersion()
	deleted := h.Resource.New()
	err = h.Store.Delete(h.Ctx, h.Key(), deleted, &k8sstorage.Preconditions{ResourceVersion: &rv}, k8sstorage.ValidateAllObjectFunc, nil, k8sstorage.DeleteOptions{})
	if err != nil && !k8sstorage.IsNotFound(err) && !k8sstorage.IsConflict(err) {
		return nil, storeerr.InterpretDeleteError(err, h.Resource.GroupResource(), h.Info.Name)
	}
	if err == nil {
		h.releaseService(deleted)
	}
	return obj, nil
}

func withFinalizer(fs []string, f string) []string {
	if slices.Contains(fs, f) {
		return fs
	}
	return append(fs, f)
}

func without(fs []string, f string) []string {
	return slices.DeleteFunc(fs, func(s string) bool { return s == f })
}
