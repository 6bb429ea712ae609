package bootstrap

import (
	"context"
	"fmt"
	"golang.org/x/sync/errgroup"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/component-helpers/auth/rbac/reconciliation"
	"k8s.io/kubernetes/plugin/pkg/auth/authorizer/rbac/bootstrappolicy"

	"github.com/sqlkube/sqlkube/bootstraptoken"
)

// reconcileRBAC creates Kubernetes' bootstrap roles and bindings
// (cluster-admin, admin/edit/view, system:basic-user, system:discovery,
// system:public-info-viewer, the controllers', scheduler's and nodes'
// roles...) and puts back what is missing from them, as kube-apiserver
// does at every start: extra rules and subjects operators added stay,
// except on roles annotated rbac.authorization.kubernetes.io/autoupdate:
// "false", which are left alone.
func reconcileRBAC(ctx context.Context, cs kubernetes.Interface) error {
	// The objects are independent (a binding may name a role that does
	// not exist yet), so they are reconciled side by side: the store
	// commits concurrent writes together, and a fresh cluster's ~150
	// objects take one tenth of the time they took one after another.
	rbac := cs.RbacV1()
	// A fresh cluster has none of them: each is created at once, without
	// the reconciler's read first (one round trip instead of two, about a
	// third of a new tenant's start). One that exists after all (another
	// server got there first) is reconciled.
	some, err := rbac.ClusterRoles().List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return fmt.Errorf("bootstrap RBAC: %w", err)
	}
	fresh := len(some.Items) == 0
	ensure := func(ctx context.Context, what string, create func() error, run func() error) error {
		if fresh {
			err := create()
			if err == nil {
				return nil
			}
			if !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("bootstrap RBAC %s: %w", what, err)
			}
		}
		return reconcile(ctx, what, run)
	}
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(rbacParallel)
	roles := append(bootstrappolicy.ClusterRoles(), bootstrappolicy.ControllerRoles()...)
	for i := range roles {
		g.Go(func() error {
			return ensure(ctx, "clusterrole "+roles[i].Name, func() error {
				_, err := rbac.ClusterRoles().Create(ctx, &roles[i], metav1.CreateOptions{})
				return err
			}, func() error {
				_, err := (&reconciliation.ReconcileRoleOptions{
					Role:    reconciliation.ClusterRoleRuleOwner{ClusterRole: &roles[i]},
					Client:  reconciliation.ClusterRoleModifier{Client: rbac.ClusterRoles()},
					Confirm: true,
				}).Run()
				return err
			})
		})
	}
	bindings := append(bootstrappolicy.ClusterRoleBindings(), bootstrappolicy.ControllerRoleBindings()...)
	bindings = append(bindings, nodeJoinBindings()...)
	for i := range bindings {
		g.Go(func() error {
			return ensure(ctx, "clusterrolebinding "+bindings[i].Name, func() error {
				_, err := rbac.ClusterRoleBindings().Create(ctx, &bindings[i], metav1.CreateOptions{})
				return err
			}, func() error {
				_, err := (&reconciliation.ReconcileRoleBindingOptions{
					RoleBinding: reconciliation.ClusterRoleBindingAdapter{ClusterRoleBinding: &bindings[i]},
					Client:      reconciliation.ClusterRoleBindingClientAdapter{Client: rbac.ClusterRoleBindings()},
					Confirm:     true,
				}).Run()
				return err
			})
		})
	}
	for ns, nsRoles := range bootstrappolicy.NamespaceRoles() {
		for i := range nsRoles {
			role := nsRoles[i]
			role.Namespace = ns
			g.Go(func() error {
				return ensure(ctx, "role "+ns+"/"+role.Name, func() error {
					_, err := rbac.Roles(ns).Create(ctx, &role, metav1.CreateOptions{})
					return err
				}, func() error {
					_, err := (&reconciliation.ReconcileRoleOptions{
						Role:    reconciliation.RoleRuleOwner{Role: &role},
						Client:  reconciliation.RoleModifier{Client: rbac, NamespaceClient: cs.CoreV1().Namespaces()},
						Confirm: true,
					}).Run()
					return err
				})
			})
		}
	}
	for ns, nsBindings := range bootstrappolicy.NamespaceRoleBindings() {
		for i := range nsBindings {
			binding := nsBindings[i]
			binding.Namespace = ns
			g.Go(func() error {
				return ensure(ctx, "rolebinding "+ns+"/"+binding.Name, func() error {
					_, err := rbac.RoleBindings(ns).Create(ctx, &binding, metav1.CreateOptions{})
					return err
				}, func() error {
					_, err := (&reconciliation.ReconcileRoleBindingOptions{
						RoleBinding: reconciliation.RoleBindingAdapter{RoleBinding: &binding},
						Client:      reconciliation.RoleBindingClientAdapter{Client: rbac, NamespaceClient: cs.CoreV1().Namespaces()},
						Confirm:     true,
					}).Run()
					return err
				})
			})
		}
	}
	return g.Wait()
}

// rbacParallel is how many RBAC objects are reconciled at once.
const rbacParallel = 32

// reconcile runs one reconciliation, again on a conflict (another API
// server reconciling at the same time).
func reconcile(ctx context.Context, what string, run func() error) error {
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		if err := ctx.Err(); err != nil {
			return err
		}
		return run()
	})
	if err != nil {
		return fmt.Errorf("bootstrap RBAC %s: %w", what, err)
	}
	return nil
}

// nodeJoinBindings are what joining nodes need, bound as kubeadm binds
// them: the default group of `sqlkube token create` tokens may ask for
// client certificates (system:node-bootstrapper) and have node client
// certificates approved automatically (nodeclient); nodes may renew their
// own (selfnodeclient); and nodes' kube-proxy, which runs with the node's
// credential, reads Services and EndpointSlices, and their pod network
// agent every Node for its routes (system:node-proxier, which has both).
func nodeJoinBindings() []rbacv1.ClusterRoleBinding {
	binding := func(name, role, kind, subject string) rbacv1.ClusterRoleBinding {
		return rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{
				Name:        name,
				Labels:      map[string]string{"kubernetes.io/bootstrapping": "rbac-defaults"},
				Annotations: map[string]string{rbacv1.AutoUpdateAnnotationKey: "true"},
			},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects: []rbacv1.Subject{{Kind: kind, APIGroup: rbacv1.GroupName, Name: subject}},
		}
	}
	return []rbacv1.ClusterRoleBinding{
		binding("sqlkube:node-bootstrapper", "system:node-bootstrapper", rbacv1.GroupKind, bootstraptoken.DefaultGroup),
		binding("sqlkube:node-autoapprove-bootstrap", "system:certificates.k8s.io:certificatesigningrequests:nodeclient", rbacv1.GroupKind, bootstraptoken.DefaultGroup),
		binding("sqlkube:node-autoapprove-certificate-rotation", "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", rbacv1.GroupKind, "system:nodes"),
		binding("sqlkube:node-proxier", "system:node-proxier", rbacv1.GroupKind, "system:nodes"),
	}
}
