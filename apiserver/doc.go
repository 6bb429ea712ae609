// Package apiserver is sqlkube's Kubernetes API server: discovery and the
// REST API of the built-in resources over storage/, on echo. Types, codecs,
// selectors and validation helpers are the upstream ones (k8s.io/api,
// k8s.io/apimachinery); there are no internal versions, so every object is
// handled in the version it is served and stored in.
package apiserver
