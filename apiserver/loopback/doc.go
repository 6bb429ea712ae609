// Package loopback is the API server's in-process client path: an
// in-memory listener whose connections act as User (system:masters), and
// the client configuration that dials it.
package loopback
