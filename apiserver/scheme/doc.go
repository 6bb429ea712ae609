// Package scheme holds the API server's runtime scheme and codecs: every
// type it serves (k8s.io/api, apiextensions, apiregistration) and
// meta.k8s.io's, with the JSON, YAML and protobuf serializers over them.
package scheme
