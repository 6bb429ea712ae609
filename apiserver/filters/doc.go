// Package filters is the chain every API request passes before a handler,
// in this order: RequestInfo (what the request asks for), Timeout,
// Authentication, the audit log (Auditor), Impersonation, the in-flight
// limits (InflightLimiter) and Authorization. Each is an echo middleware
// over interfaces (Kubernetes' authenticator and authorizer), so none of
// them knows the Server.
package filters
