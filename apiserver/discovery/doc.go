// Package discovery serves what clients learn the API from: /version,
// /api, /apis, each group-version's resource list and the aggregated
// discovery documents (apidiscovery.k8s.io v2 and v2beta1), for the
// resources the registry holds plus what aggregated API servers add
// (Remote).
package discovery
