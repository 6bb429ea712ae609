package main

import (
	"strings"

	"github.com/spf13/pflag"

	"github.com/sqlkube/sqlkube/clusterdns"
	"github.com/sqlkube/sqlkube/controlplane"
)

// The flags of the control plane's DNS and in-process components.

func addDNSFlags(fl *pflag.FlagSet, f *controlplane.DNSConfig) {
	fl.BoolVar(&f.Disable, "disable-dns", false, "serve no cluster DNS and keep no kube-dns Service (bring your own at --cluster-dns)")
	fl.StringVar(&f.IP, "cluster-dns", "", "cluster IP of the kube-dns Service, which pods' resolv.conf names (default: the tenth address of --service-cluster-ip-range, as kubeadm's)")
	fl.StringVar(&f.Domain, "cluster-domain", clusterdns.DefaultDomain, "the cluster's DNS domain")
	fl.StringVar(&f.Address, "cluster-dns-address", "", "address this server answers DNS on, which the kube-dns endpoints name (default: --advertise-address, or the host's address if that is a loopback one: endpoints may not be loopback addresses)")
	fl.IntVar(&f.Port, "cluster-dns-port", clusterdns.DefaultPort, "port (UDP and TCP) this server answers DNS on; the kube-dns Service's port 53 leads to it")
	fl.StringSliceVar(&f.Upstreams, "cluster-dns-upstream", nil, "where names outside the cluster are forwarded: IP[:PORT] addresses, or a resolv.conf whose nameservers are used (default "+clusterdns.DefaultUpstream+")")
}

func addComponentFlags(fl *pflag.FlagSet, f *controlplane.Components) {
	fl.StringSliceVar(&f.Controllers, "controllers", strings.Split(controlplane.DefaultControllers, ","),
		"controllers to run, in kube-controller-manager's syntax: '*' all on by default, 'name' one more, '-name' one fewer, '-*' none (names: sqlkube controller-manager --help)")
	fl.StringArrayVar(&f.ControllerArgs, "kube-controller-manager-arg", nil, "a kube-controller-manager flag for the in-process controllers, e.g. --kube-controller-manager-arg=--node-monitor-grace-period=20s (repeatable)")
	fl.BoolVar(&f.DisableScheduler, "disable-scheduler", false, "do not run the scheduler")
	fl.StringVar(&f.ClusterCIDR, "cluster-cidr", "10.42.0.0/16", "pods' addresses: the node-ipam controller gives each node a /24 of it as spec.podCIDR (--kube-controller-manager-arg=--node-cidr-mask-size=N for another size; empty: no pod CIDRs)")
	fl.StringArrayVar(&f.SchedulerArgs, "kube-scheduler-arg", nil, "a kube-scheduler flag for the in-process scheduler, e.g. --kube-scheduler-arg=--config=sched.yaml (repeatable)")
}
