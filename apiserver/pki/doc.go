// Package pki creates and keeps the certificates of a single-node cluster:
// a cluster CA and the API server's serving certificate, a client CA and an
// admin client certificate (group system:masters), a front-proxy CA and
// the client certificate the API server presents to aggregated API
// servers (CN front-proxy-client, as kubeadm names it), the
// service-account signing key and, when the etcd API is served off the host, the etcd
// serving and client certificates (from the cluster CA). Keys are written
// 0600; a restart reuses what exists; Rotate renews the leaves.
package pki
