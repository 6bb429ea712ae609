package handlers

import (
	"context"
	"fmt"

	"github.com/sqlkube/sqlkube/apiserver/allocator"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	api "k8s.io/kubernetes/pkg/apis/core"
	svcstorage "k8s.io/kubernetes/pkg/registry/core/service/storage"
)

// Services get their IP families, cluster IPs and node ports from
// Kubernetes' own service storage's allocation hooks
// (allocator.ServiceHooks), claiming values through apiserver/allocator.

// finishFunc ends an allocation: true keeps what was claimed (and frees
// what an update gave up), false gives back what was claimed.
type finishFunc func(success bool)

func finishNothing(bool) {}

// beginServiceCreate allocates a new service's addresses in place
// (after mutating admission, before the strategy, as kube-apiserver);
// other objects pass untouched. A dry run claims nothing.
func (h *Request) beginServiceCreate(obj runtime.Object) (finishFunc, error) {
	svc, ok := obj.(*corev1.Service)
	if !ok || h.API.ClusterIPs == nil {
		return finishNothing, nil
	}
	return h.runServiceHook(svc, nil, func(rest *svcstorage.REST, in, _ *api.Service) (genericregistry.FinishFunc, error) {
		return rest.Store.BeginCreate(h.Ctx, in, &metav1.CreateOptions{DryRun: h.dryRunOption()})
	})
}

// beginServiceUpdate carries a service's addresses over an update:
// omitted ones are kept, a cluster IP cannot change, a new type gets or
// gives back what it needs.
func (h *Request) beginServiceUpdate(obj, old runtime.Object) (finishFunc, error) {
	svc, ok := obj.(*corev1.Service)
	oldSvc, _ := old.(*corev1.Service)
	if !ok || oldSvc == nil || h.API.ClusterIPs == nil {
		return finishNothing, nil
	}
	return h.runServiceHook(svc, oldSvc, func(rest *svcstorage.REST, in, oldIn *api.Service) (genericregistry.FinishFunc, error) {
		return rest.Store.BeginUpdate(h.Ctx, in, oldIn, &metav1.UpdateOptions{DryRun: h.dryRunOption()})
	})
}

// runServiceHook runs one of the hooks on the internal versions of svc
// (and old) and writes what it set back into svc.
func (h *Request) runServiceHook(svc, old *corev1.Service, hook func(rest *svcstorage.REST, in, oldIn *api.Service) (genericregistry.FinishFunc, error)) (finishFunc, error) {
	rest, err := allocator.ServiceHooks(h.Ctx, h.API.ClusterIPs, h.API.NodePorts, svc.Namespace+"/"+svc.Name)
	if err != nil {
		return nil, err
	}
	in := &api.Service{}
	if err := legacyscheme.Scheme.Convert(svc, in, nil); err != nil {
		return nil, err
	}
	var oldIn *api.Service
	if old != nil {
		oldIn = &api.Service{}
		if err := legacyscheme.Scheme.Convert(old, oldIn, nil); err != nil {
			return nil, err
		}
	}
	finish, err := hook(rest, in, oldIn)
	if err != nil {
		return nil, err
	}
	if err := legacyscheme.Scheme.Convert(in, svc, nil); err != nil {
		finish(h.Ctx, false)
		return nil, err
	}
	ctx := context.WithoutCancel(h.Ctx)
	return func(success bool) { finish(ctx, success) }, nil
}

// dryRunOption is the request's dryRun option as the hooks take it.
func (h *Request) dryRunOption() []string {
	if h.adm.dryRun {
		return []string{metav1.DryRunAll}
	}
	return nil
}

// releaseService gives back a deleted service's cluster IPs and node
// ports.
func (h *Request) releaseService(obj runtime.Object) {
	svc, ok := obj.(*corev1.Service)
	if !ok || h.API.ClusterIPs == nil {
		return
	}
	for _, ip := range svc.Spec.ClusterIPs {
		if ip != corev1.ClusterIPNone && ip != "" {
			_ = h.API.ClusterIPs.Release(h.Ctx, ip)
		}
	}
	for _, p := range svc.Spec.Ports {
		if p.NodePort != 0 {
			_ = h.API.NodePorts.Release(h.Ctx, fmt.Sprint(p.NodePort))
		}
	}
	if svc.Spec.HealthCheckNodePort != 0 {
		_ = h.API.NodePorts.Release(h.Ctx, fmt.Sprint(svc.Spec.HealthCheckNodePort))
	}
}
