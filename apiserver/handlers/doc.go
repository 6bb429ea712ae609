// Package handlers serves the REST verbs (get, list, watch, create,
// update, patch, server-side apply, delete, deletecollection) and the
// status subresource of whatever the registry holds: a
// Request is one call on one resource, API what every call reads from
// (stores, admission, managed fields, allocation). Subresources with
// their own handlers (package subresources, scale included) plug in
// through API.Subresources and API.Scale.
package handlers
