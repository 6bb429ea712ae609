// Package clusterdns is the cluster's DNS: CoreDNS with its kubernetes
// plugin, embedded as a library and configured by a Corefile written
// here (Start), and the kube-system/kube-dns Service whose endpoints are
// every live server's DNS address (RunService), as each API server keeps
// the kubernetes Service. CoreDNS reads the cluster through the client
// it is given, acting as kubeadm's coredns service account (EnsureRBAC,
// ClientConfig). It uses client-go only.
package clusterdns
