// Package aggregator is API aggregation, as kube-aggregator does it: the
// APIServices with a service are proxied (as the caller, with the
// front-proxy client certificate), kube-aggregator's availability
// controllers keep their conditions, their groups join discovery and
// their OpenAPI v3 the index; and the CAs aggregated servers trust are
// published in kube-system/extension-apiserver-authentication.
package aggregator
