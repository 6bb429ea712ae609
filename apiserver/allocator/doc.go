// Package allocator hands out services' cluster IPs and node ports, one
// etcd key per value created only if absent, so that API servers sharing
// a database never give the same value twice.
package allocator
