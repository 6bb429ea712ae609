// Package authz decides what a user may do: system:masters, Kubernetes'
// Node authorizer and RBAC in kube-apiserver's order (or AlwaysAllow),
// and the RBAC escalation checks on writes of roles and bindings. The
// filter that asks it is filters.Authorization.
package authz
