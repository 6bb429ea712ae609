// Package admission builds the API server's admission chain from
// Kubernetes' own plugins (lifecycle, limits, service accounts, pod
// security, priority, webhooks, validating admission policy, quota) in
// kube-apiserver's order, and the object interfaces they convert with.
// The handlers call the chain (handlers/admission.go).
package admission
