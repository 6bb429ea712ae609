package registry

import (
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// resource is shorthand for a registry entry of a named group.
func resource(gvk schema.GroupVersionKind, plural, singular string, namespaced, status bool, newObj, newList func() runtime.Object, shortNames ...string) *Resource {
	return &Resource{
		GVK: gvk, Plural: plural, Singular: singular, Namespaced: namespaced, Status: status,
		New: newObj, NewList: newList, ShortNames: shortNames, StoragePrefix: "/" + plural,
	}
}

// groupResources are the resources of the named API groups served so far,
// stored where kube-apiserver stores them.
func groupResources() []*Resource {
	apps, batch := appsv1.SchemeGroupVersion, batchv1.SchemeGroupVersion
	rbac := rbacv1.SchemeGroupVersion
	all := []string{"all"}
	rs := []*Resource{
		resource(apps.WithKind("Deployment"), "deployments", "deployment", true, true,
			func() runtime.Object { return &appsv1.Deployment{} }, func() runtime.Object { return &appsv1.DeploymentList{} }, "deploy"),
		resource(apps.WithKind("ReplicaSet"), "replicasets", "replicaset", true, true,
			func() runtime.Object { return &appsv1.ReplicaSet{} }, func() runtime.Object { return &appsv1.ReplicaSetList{} }, "rs"),
		resource(apps.WithKind("StatefulSet"), "statefulsets", "statefulset", true, true,
			func() runtime.Object { return &appsv1.StatefulSet{} }, func() runtime.Object { return &appsv1.StatefulSetList{} }, "sts"),
		resource(apps.WithKind("DaemonSet"), "daemonsets", "daemonset", true, true,
			func() runtime.Object { return &appsv1.DaemonSet{} }, func() runtime.Object { return &appsv1.DaemonSetList{} }, "ds"),
		resource(apps.WithKind("ControllerRevision"), "controllerrevisions", "controllerrevision", true, false,
			func() runtime.Object { return &appsv1.ControllerRevision{} }, func() runtime.Object { return &appsv1.ControllerRevisionList{} }),
		resource(batch.WithKind("Job"), "jobs", "job", true, true,
			func() runtime.Object { return &batchv1.Job{} }, func() runtime.Object { return &batchv1.JobList{} }),
		resource(batch.WithKind("CronJob"), "cronjobs", "cronjob", true, true,
			func() runtime.Object { return &batchv1.CronJob{} }, func() runtime.Object { return &batchv1.CronJobList{} }, "cj"),
		resource(coordinationv1.SchemeGroupVersion.WithKind("Lease"), "leases", "lease", true, false,
			func() runtime.Object { return &coordinationv1.Lease{} }, func() runtime.Object { return &coordinationv1.LeaseList{} }),
		resource(discoveryv1.SchemeGroupVersion.WithKind("EndpointSlice"), "endpointslices", "endpointslice", true, false,
			func() runtime.Object { return &discoveryv1.EndpointSlice{} }, func() runtime.Object { return &discoveryv1.EndpointSliceList{} }),
		resource(policyv1.SchemeGroupVersion.WithKind("PodDisruptionBudget"), "poddisruptionbudgets", "poddisruptionbudget", true, true,
			func() runtime.Object { return &policyv1.PodDisruptionBudget{} }, func() runtime.Object { return &policyv1.PodDisruptionBudgetList{} }, "pdb"),
		resource(schedulingv1.SchemeGroupVersion.WithKind("PriorityClass"), "priorityclasses", "priorityclass", false, false,
			func() runtime.Object { return &schedulingv1.PriorityClass{} }, func() runtime.Object { return &schedulingv1.PriorityClassList{} }, "pc"),
		resource(rbac.WithKind("Role"), "roles", "role", true, false,
			func() runtime.Object { return &rbacv1.Role{} }, func() runtime.Object { return &rbacv1.RoleList{} }),
		resource(rbac.WithKind("RoleBinding"), "rolebindings", "rolebinding", true, false,
			func() runtime.Object { return &rbacv1.RoleBinding{} }, func() runtime.Object { return &rbacv1.RoleBindingList{} }),
		resource(rbac.WithKind("ClusterRole"), "clusterroles", "clusterrole", false, false,
			func() runtime.Object { return &rbacv1.ClusterRole{} }, func() runtime.Object { return &rbacv1.ClusterRoleList{} }),
		resource(rbac.WithKind("ClusterRoleBinding"), "clusterrolebindings", "clusterrolebinding", false, false,
			func() runtime.Object { return &rbacv1.ClusterRoleBinding{} }, func() runtime.Object { return &rbacv1.ClusterRoleBindingList{} }),
	}
	for _, r := range rs {
		switch r.Plural {
		case "deployments", "replicasets", "statefulsets", "daemonsets", "jobs", "cronjobs":
			r.Categories = all
		}
		r.Scale = r.Plural == "deployments" || r.Plural == "replicasets" || r.Plural == "statefulsets"
	}
	// Fields Kubernetes lets selectors name for these types.
	for _, r := range rs {
		if r.Plural == "replicasets" {
			r.Fields = func(obj runtime.Object) fields.Set {
				return fields.Set{"status.replicas": itoa32(obj.(*appsv1.ReplicaSet).Status.Replicas)}
			}
		}
		if r.Plural == "jobs" {
			r.Fields = func(obj runtime.Object) fields.Set {
				return fields.Set{"status.successful": itoa32(obj.(*batchv1.Job).Status.Succeeded)}
			}
		}
	}
	return rs
}

func itoa32(v int32) string { return strconv.FormatInt(int64(v), 10) }
