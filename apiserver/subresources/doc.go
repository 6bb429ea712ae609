// Package subresources serves the core group's subresources that have
// their own handlers: pods' binding and eviction, the kubelet's pod logs,
// exec, attach and port-forward, nodes' proxy, and service accounts'
// token (TokenRequest). Table is what the API server installs as
// handlers.API.Subresources.
package subresources
