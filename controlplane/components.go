package controlplane

import (
	"context"
	"errors"
	"github.com/sqlkube/sqlkube/controllers/kubeletserving"
	"k8s.io/client-go/kubernetes"
	"strings"
	"sync"

	"github.com/rs/zerolog"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/rest"

	"github.com/sqlkube/sqlkube/apiserver"
	"github.com/sqlkube/sqlkube/apiserver/pki"
	"github.com/sqlkube/sqlkube/controllers/manager"
	"github.com/sqlkube/sqlkube/election"
	"github.com/sqlkube/sqlkube/scheduler"
)

// DefaultControllers are the controllers `sqlkube server` runs: every one
// kube-controller-manager enables by default, and the bootstrap-token
// signer and cleaner, which kubeadm clusters enable too (sqlkube issues
// bootstrap tokens).
const DefaultControllers = "*,bootstrap-signer-controller,token-cleaner-controller"

// Components choose what runs beside the API: the controller manager and
// the scheduler, in-process. The fields are `sqlkube server`'s
// --controllers, --kube-controller-manager-arg, --disable-scheduler,
// --kube-scheduler-arg and --cluster-cidr.
type Components struct {
	// Controllers in kube-controller-manager's syntax ('*', 'name',
	// '-name', '-*').
	Controllers      []string
	ControllerArgs   []string
	DisableScheduler bool
	SchedulerArgs    []string
	// ClusterCIDR is where the node-ipam controller takes nodes' pod
	// CIDRs from ("": nodes get none).
	ClusterCIDR string
	// Elector, if set, decides when the controller manager and the
	// scheduler run, in place of their own Leases
	// (kube-system/kube-controller-manager and kube-system/kube-scheduler,
	// each read and renewed every 2 s, through the API and so the
	// datastore). `sqlkube server` leaves it nil: its servers on one
	// datastore elect one controller manager and one scheduler through
	// those Leases. A tenant host sets it: the host decides which of its
	// tenants' components run (tenant.Host), and an idle tenant renews
	// nothing.
	//
	// The Elector must never let two processes run one cluster's
	// components at once: two controller managers would fight over every
	// object.
	Elector election.Elector
	// Endpoints serves the controller manager's and the scheduler's own
	// HTTPS endpoints, as kube-controller-manager and kube-scheduler do:
	// /metrics with their metric families, /healthz, /livez and /readyz,
	// where --secure-port and --bind-address in ControllerArgs and
	// SchedulerArgs say (upstream's 10257 and 10259 on every address by
	// default; --secure-port=0 serves none, and that component's families
	// are then on the API server's /metrics). `sqlkube server` sets it; a
	// host's tenants serve none (the host's /metrics has their figures).
	Endpoints bool
}

// components are what the control plane needs to run the controller
// manager and the scheduler in-process.
type components struct {
	*Components
	// Files is the generated PKI (nil when the operator brought theirs):
	// its CAs sign CSRs and are the root CA pods get.
	Files *pki.Files
	// ServiceAccountKeyFile signs legacy service-account token secrets.
	ServiceAccountKeyFile string
	ServiceClusterIPRange string
	// resourceMetrics is the scheduler's /metrics/resources (nil: its
	// endpoint is not served).
	resourceMetrics *scheduler.ResourceMetrics
	// discovery is the API server's discovery generation: the
	// controllers read discovery again when it changes, not every 30 s.
	discovery manager.Generation
}

// controllersDisabled reports whether --controllers turns every controller
// off.
func (f *Components) controllersDisabled() bool {
	return len(f.Controllers) == 1 && f.Controllers[0] == "-*"
}

// The client rate of the in-process controllers unless
// --kube-controller-manager-arg gives one (the scheduler gets the same).
const (
	inProcessQPS   = "5000"
	inProcessBurst = "10000"
)

// controllerOptions are kube-controller-manager's options for the
// in-process controllers: the server's PKI and service ranges, then the
// operator's --kube-controller-manager-arg flags, which win.
func (c *components) controllerOptions() (*manager.Options, error) {
	o, err := manager.NewOptions()
	if err != nil {
		return nil, err
	}
	args := append([]string{"--controllers=" + strings.Join(c.Controllers, ",")}, c.ControllerArgs...)
	if err := o.Parse(args); err != nil {
		return nil, err
	}
	set := map[string]string{
		"service-account-private-key-file": c.ServiceAccountKeyFile,
		"service-cluster-ip-range":         c.ServiceClusterIPRange,
		"cluster-name":                     "sqlkube",
	}
	if c.ClusterCIDR != "" {
		set["cluster-cidr"], set["allocate-node-cidrs"] = c.ClusterCIDR, "true"
	}
	// In-process, as for the scheduler, the client's rate is not what
	// should limit the controllers: at kube-controller-manager's 20 QPS a
	// ReplicaSet of 1,000 takes 50 s to create and as long to
	// garbage-collect.
	if fs := o.FlagSet(); !fs.Changed("kube-api-qps") && !fs.Changed("kube-api-burst") {
		set["kube-api-qps"], set["kube-api-burst"] = inProcessQPS, inProcessBurst
	}
	if c.Files != nil {
		// Client certificates (nodes', users') come from the client CA,
		// kubelets' serving certificates from the cluster CA that clients
		// of the API already trust.
		for k, v := range map[string]string{
			"root-ca-file": c.Files.CACert,
			"cluster-signing-kube-apiserver-client-cert-file": c.Files.ClientCACert,
			"cluster-signing-kube-apiserver-client-key-file":  c.Files.ClientCAKey,
			"cluster-signing-kubelet-client-cert-file":        c.Files.ClientCACert,
			"cluster-signing-kubelet-client-key-file":         c.Files.ClientCAKey,
			"cluster-signing-kubelet-serving-cert-file":       c.Files.CACert,
			"cluster-signing-kubelet-serving-key-file":        c.Files.CAKey,
		} {
			set[k] = v
		}
	}
	for k, v := range set {
		if v == "" {
			continue
		}
		if err := o.Set(k, v); err != nil {
			return nil, err
		}
	}
	return o, nil
}

// run starts the controller manager and the scheduler over cfg (the
// loopback) until ctx ends; wait blocks until both have stopped. Each
// runs while the Elector lets it, or else stands for its Lease and,
// having lost it, stands again.
func (c *components) run(ctx context.Context, cfg *rest.Config, log zerolog.Logger) (wait func(), err error) {
	var wg sync.WaitGroup
	var started []string
	if !c.controllersDisabled() {
		o, err := c.controllerOptions()
		if err != nil {
			return nil, err
		}
		o.SetDiscoveryGeneration(c.discovery)
		cfg := rest.CopyConfig(cfg)
		cfg.UserAgent = "sqlkube-controller-manager"
		// Its client's rest_client_* series are its endpoint's.
		cfg.Host = "http://" + apiserver.RESTClientHost("kube-controller-manager")
		wg.Go(func() {
			defer utilruntime.HandleCrash() // a panic stops this component only
			if err := manager.Run(ctx, cfg, o, c.policy()); err != nil && !errors.Is(err, context.Canceled) {
				log.Error().Err(err).Msg("controller manager stopped")
			}
		})
		started = append(started, "controller-manager")
		// Kubelets' serving certificates, which kube-controller-manager
		// leaves to the operator: approved for nodes the cluster knows.
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return nil, err
		}
		wg.Go(func() {
			defer utilruntime.HandleCrash()
			if err := kubeletserving.Run(ctx, cs); err != nil && !errors.Is(err, context.Canceled) {
				log.Error().Err(err).Msg("kubelet serving certificate approver stopped")
			}
		})
	}
	if !c.DisableScheduler {
		o := scheduler.NewOptions()
		if err := o.Parse(c.SchedulerArgs); err != nil {
			return nil, err
		}
		sc, err := o.Config()
		if err != nil {
			return nil, err
		}
		// In-process, the client's rate is not what limits the scheduler.
		if !o.FlagSet().Changed("kube-api-qps") && sc.ClientConnection.QPS == 50 {
			sc.ClientConnection.QPS, sc.ClientConnection.Burst = 5000, 10000
		}
		cfg := rest.CopyConfig(cfg)
		cfg.Host = "http://" + apiserver.RESTClientHost("kube-scheduler")
		wg.Go(func() {
			defer utilruntime.HandleCrash()
			if err := scheduler.Run(ctx, cfg, sc, c.policy(), c.resourceMetrics); err != nil && !errors.Is(err, context.Canceled) {
				log.Error().Err(err).Msg("scheduler stopped")
			}
		})
		started = append(started, "scheduler")
	}
	how := "each leads through its Lease in kube-system"
	if c.Elector != nil {
		how = "they run while the host lets them"
	}
	log.Info().Strs("components", started).Str("controllers", strings.Join(c.Controllers, ",")).Msgf("control-plane components started (%s)", how)
	return wg.Wait, nil
}

// policy is how the controller manager and the scheduler are elected:
// by Elector, or by their own Leases, standing again after losing them
// (a database hiccup must not leave the cluster without controllers).
func (c *components) policy() election.Policy {
	if c.Elector != nil {
		return election.Policy{Elector: c.Elector}
	}
	return election.Policy{Recampaign: true}
}
