// Package admission builds the API server's admission chain from
// Kubernetes' own plugins (every one kube-apiserver enables by default:
// lifecycle, limits, service accounts, pod security, priority, default
// tolerations, storage and ingress classes, storage protection,
// certificates, policies, webhooks, quota) in kube-apiserver's order, and the object interfaces they convert with.
// The handlers call the chain (handlers/admission.go).
package admission
