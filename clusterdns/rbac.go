package clusterdns

import (
	"context"
	"fmt"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// CoreDNS's identity and permissions, named as kubeadm names them.
const (
	ServiceAccountName = "coredns"
	ClusterRoleName    = "system:coredns"
)

// ClientConfig is loopback (a client configuration allowed to
// impersonate) acting as the coredns service account of kube-system, so
// that CoreDNS reads the cluster with that account's permissions only.
func ClientConfig(loopback *rest.Config) *rest.Config {
	cfg := rest.CopyConfig(loopback)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: serviceaccount.MakeUsername(metav1.NamespaceSystem, ServiceAccountName),
		Groups:   serviceaccount.MakeGroupNames(metav1.NamespaceSystem),
	}
	cfg.UserAgent = "sqlkube-coredns"
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	return cfg
}

// ClusterRole is what CoreDNS reads: services, endpoint slices (and
// endpoints), pods and namespaces, to list and watch.
func ClusterRole() *rbacv1.ClusterRole {
	return &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: ClusterRoleName, Labels: map[string]string{"kubernetes.io/bootstrapping": "rbac-defaults"}},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"endpoints", "services", "pods", "namespaces"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
		},
	}
}

// EnsureRBAC creates (or puts back) the coredns service account, the
// system:coredns ClusterRole and its binding to the account.
func EnsureRBAC(ctx context.Context, cs kubernetes.Interface) error {
	ns := metav1.NamespaceSystem
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: ServiceAccountName, Namespace: ns}}
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("service account %s/%s: %w", ns, sa.Name, err)
	}
	role := ClusterRole()
	cur, err := cs.RbacV1().ClusterRoles().Get(ctx, role.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{})
	case err == nil && !apiequality.Semantic.DeepEqual(cur.Rules, role.Rules):
		cur.Rules = role.Rules
		_, err = cs.RbacV1().ClusterRoles().Update(ctx, cur, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("cluster role %s: %w", role.Name, err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: ClusterRoleName, Labels: role.Labels},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: ClusterRoleName},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: ServiceAccountName, Namespace: ns}},
	}
	// A binding's roleRef cannot change; its subjects can.
	curB, err := cs.RbacV1().ClusterRoleBindings().Get(ctx, binding.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{})
	case err == nil && curB.RoleRef != binding.RoleRef:
		if err = cs.RbacV1().ClusterRoleBindings().Delete(ctx, binding.Name, metav1.DeleteOptions{}); err == nil {
			_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{})
		}
	case err == nil && !apiequality.Semantic.DeepEqual(curB.Subjects, binding.Subjects):
		curB.Subjects = binding.Subjects
		_, err = cs.RbacV1().ClusterRoleBindings().Update(ctx, curB, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("cluster role binding %s: %w", binding.Name, err)
	}
	return nil
}

// Authorized reports whether CoreDNS, through cfg (ClientConfig's), may
// already list everything its ClusterRole names: the API server's RBAC
// authorizer learns of a new binding through its informers, a moment
// after EnsureRBAC has made it, and CoreDNS's informers started before
// then would warn that they are forbidden.
func Authorized(ctx context.Context, cfg *rest.Config) (bool, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return false, err
	}
	for _, rule := range ClusterRole().Rules {
		for _, group := range rule.APIGroups {
			for _, resource := range rule.Resources {
				review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
					ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "list", Group: group, Resource: resource},
				}}
				res, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
				if err != nil {
					return false, err
				}
				if !res.Status.Allowed {
					return false, nil
				}
			}
		}
	}
	return true, nil
}
