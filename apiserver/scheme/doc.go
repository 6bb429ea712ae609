// Package scheme holds the API server's runtime scheme and codecs: every
// type it serves (k8s.io/api, apiextensions, apiregistration) and
// meta.k8s.io's, with the JSON, YAML and protobuf serializers over them.
// It installs Kubernetes' API groups in the legacy scheme first
// (install.go), so decoding defaults as kube-apiserver's does, and
// converts to and from the internal versions Kubernetes' strategies and
// admission plugins work on (internalversion.go).
package scheme
