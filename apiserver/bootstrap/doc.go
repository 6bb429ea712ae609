// Package bootstrap writes what a fresh cluster has (system namespaces
// and priority classes, the default ServiceCIDR, flow control's defaults,
// Kubernetes' bootstrap RBAC policy) and keeps the default/kubernetes
// service pointing at the live API servers.
package bootstrap
