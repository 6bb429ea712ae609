// Package controlplane builds one Kubernetes control plane from a Config:
// the cluster identity, the PKI, the API server over a storage client,
// the kubernetes Service, cluster-info, the cluster DNS, and in-process
// the controller manager, the scheduler and simulated nodes. `sqlkube
// server` and `sqlkube apiserver` build one each; a tenant host builds
// many in one process.
//
// What Kubernetes keeps process-wide is the same for every control plane
// of a process: the feature gates (set before any is built), whether pods
// may be privileged (Config.AllowPrivileged: the last Serve's value wins,
// so a host gives every tenant the same), the API scheme and the klog
// output.
package controlplane

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/sqlkube/sqlkube/apiserver"
	"github.com/sqlkube/sqlkube/apiserver/authn"
	"github.com/sqlkube/sqlkube/apiserver/authz"
	"github.com/sqlkube/sqlkube/apiserver/filters"
	"github.com/sqlkube/sqlkube/apiserver/pki"
	"github.com/sqlkube/sqlkube/clusterdns"
)

// Config is one control plane. Its fields are the flags of `sqlkube
// server` that carry their names (DataDir is --data-dir, …); errors name
// the flags.
type Config struct {
	// DataDir holds the certificates (tls/), the cluster token and the
	// admin kubeconfig.
	DataDir      string
	BindAddress  string
	SecurePort   int
	TLSSANs      []string
	TLSCertFile  string
	TLSKeyFile   string
	ClientCAFile string
	ServiceIPs   string
	NodePorts    string
	Advertise    string
	// KubeconfigServer is the API URL written into the admin kubeconfig.
	KubeconfigServer string
	// Token (or the content of TokenFile) opens the cluster identity in
	// the datastore (identity.go).
	Token, TokenFile string
	// RandomToken says Token is identity.NewToken's (random, as a
	// tenant host makes them): the identity is sealed with a light key
	// derivation.
	RandomToken bool
	// authentication and authorization
	TokenAuthFile     string
	SASigningKeyFile  string
	SAIssuer          string
	AuthorizationMode string
	// DisableAnonymousAuth is --anonymous-auth=false
	// (apiserver.Config.DisableAnonymousAuth).
	DisableAnonymousAuth bool
	Encryption           string
	MaxInflight          int
	MaxMutating          int
	Compaction           time.Duration
	AllowPrivileged      bool
	AuditLog             string
	AuditPolicy          string
	DisableAdmission     []string
	// FakeNodes simulated nodes run in-process (with Components only).
	FakeNodes int
	// NoMetrics leaves the API's /metrics unserved (a host's tenants:
	// the process's metrics would show them each other's), and its
	// requests and admissions out of Kubernetes' process-wide request and
	// admission metrics, which the host's /metrics serves as its own API's
	// (the host counts each tenant's requests under its own label).
	NoMetrics bool
	// WatchCacheBookmarkTick is apiserver.Config's (0: upstream's second;
	// a host's tenants, many idle in one process, tick less).
	WatchCacheBookmarkTick time.Duration
	// DNS is the cluster DNS this server runs.
	DNS DNSConfig
	// Components, if set, run beside the API (nil: the API alone).
	Components *Components

	// Listener, if set, is where the API is served; BindAddress still
	// names the address clients on this host use. Serve closes it.
	Listener net.Listener
	// Node, if set, runs this host's node once the API serves, until ctx
	// ends.
	Node func(ctx context.Context, env NodeEnv) error
	// Serving, if set, is called once the API serves and the admin
	// kubeconfig is written.
	Serving func(Serving)
	// Metrics and ReadyzChecks are the API server's (apiserver.Config):
	// what /metrics serves beside the API server's families, and more
	// checks of /readyz (the in-process datastore's).
	Metrics      prometheus.Gatherer
	ReadyzChecks []apiserver.ReadyzCheck
	// WrapHandler, if set, wraps the API's HTTP handler (a host counts
	// each tenant's requests with it).
	WrapHandler func(http.Handler) http.Handler

	// Log and Out are where the control plane logs, and where it prints
	// what a user is told (the API's URL, the kubeconfig; nil: nowhere).
	Log zerolog.Logger
	Out io.Writer
}

// NodeEnv is what a node on the control plane's host is given.
type NodeEnv struct {
	// URL is the API's URL for clients on this host.
	URL   string
	Files pki.Files
	// ClusterDNS and ClusterDomain are what pods' resolv.conf names.
	ClusterDNS    []string
	ClusterDomain string
}

// Serving is a control plane that serves.
type Serving struct {
	// URL is the API's URL for clients on this host.
	URL string
	// Kubeconfig is the admin kubeconfig's path ("" when the operator
	// brought the PKI).
	Kubeconfig string
	Files      pki.Files
}

func (c *Config) out() io.Writer {
	if c.Out == nil {
		return io.Discard
	}
	return c.Out
}

// Defaults is a Config with `sqlkube server`'s defaults (DataDir and
// the listener aside).
func Defaults() Config {
	return Config{
		BindAddress: DefaultBindAddress, SecurePort: 6443,
		ServiceIPs: apiserver.DefaultServiceClusterIPRange, NodePorts: apiserver.DefaultServiceNodePortRange,
		SAIssuer: authn.DefaultServiceAccountIssuer, AuthorizationMode: authz.ModeRBAC,
		MaxInflight: filters.DefaultMaxRequestsInflight, MaxMutating: filters.DefaultMaxMutatingRequestsInflight,
		Compaction: apiserver.DefaultCompactionInterval, AllowPrivileged: true,
		DNS: DNSConfig{Domain: clusterdns.DefaultDomain, Port: clusterdns.DefaultPort},
	}
}

// DefaultComponents are `sqlkube server`'s default components.
func DefaultComponents() *Components {
	return &Components{Controllers: strings.Split(DefaultControllers, ","), ClusterCIDR: "10.42.0.0/16"}
}
