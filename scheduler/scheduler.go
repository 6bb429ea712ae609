// Package scheduler runs Kubernetes' own scheduler
// (k8s.io/kubernetes/pkg/scheduler with its in-tree plugins) as a library,
// configured as kube-scheduler is (a KubeSchedulerConfiguration and its
// flags), over any rest.Config, under leader election on the Lease
// kube-system/kube-scheduler. Placement decisions are kube-scheduler's.
package scheduler

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"

	"github.com/spf13/pflag"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	k8sscheduler "k8s.io/kubernetes/pkg/scheduler"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/latest"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/validation"
	"k8s.io/kubernetes/pkg/scheduler/metrics/resources"
	"k8s.io/kubernetes/pkg/scheduler/profile"

	"github.com/sqlkube/sqlkube/election"
	"github.com/sqlkube/sqlkube/internal/endpoint"
)

// Options are kube-scheduler's options: --config, --kubeconfig, --master,
// the --leader-elect* flags and the deprecated client flags
// (--kube-api-qps, --kube-api-burst, --kube-api-content-type).
type Options struct {
	ks    *options.Options
	flags *pflag.FlagSet
}

// takenFlagSets are the kube-scheduler flag sets sqlkube takes whole; of
// its HTTPS endpoint's it takes endpoint.Flags (sqlkube serves the
// endpoint), and klog's and the feature gates' none.
var takenFlagSets = []string{"misc", "leader election", "deprecated"}

// NewOptions returns kube-scheduler's defaults.
func NewOptions() *Options {
	ks := options.NewOptions()
	o := &Options{ks: ks, flags: pflag.NewFlagSet("kube-scheduler", pflag.ContinueOnError)}
	for _, name := range takenFlagSets {
		if fs := ks.Flags.FlagSets[name]; fs != nil {
			o.flags.AddFlagSet(fs)
		}
	}
	_ = o.flags.MarkHidden("pod-max-in-unschedulable-pods-duration")
	endpoint.AddFlags(o.flags, ks.Flags.FlagSets["secure serving"])
	return o
}

// Endpoint is where the scheduler's HTTPS endpoint listens (upstream's
// 10259 on every address unless --secure-port and --bind-address say
// otherwise; none with --secure-port=0) and the certificate it serves
// (--tls-cert-file, --tls-private-key-file).
func (o *Options) Endpoint() endpoint.Address { return endpoint.FromOptions(o.ks.SecureServing) }

// FlagSet holds kube-scheduler's flags, to add to a command or to Parse.
func (o *Options) FlagSet() *pflag.FlagSet { return o.flags }

// Parse sets options from kube-scheduler style arguments.
func (o *Options) Parse(args []string) error {
	if err := o.flags.Parse(args); err != nil {
		return fmt.Errorf("scheduler: %w", err)
	}
	return nil
}

// Set sets one flag unless it was given explicitly.
func (o *Options) Set(name, value string) error {
	f := o.flags.Lookup(name)
	if f == nil {
		return fmt.Errorf("scheduler: no flag --%s", name)
	}
	if f.Changed {
		return nil
	}
	return o.flags.Set(name, value)
}

// Config is the KubeSchedulerConfiguration the options give: --config's
// file (defaulted and validated) or kube-scheduler's defaults, with the
// leader-election and client flags applied as kube-scheduler applies them.
func (o *Options) Config() (*schedconfig.KubeSchedulerConfiguration, error) {
	if o.flags.Changed("pod-max-in-unschedulable-pods-duration") {
		return nil, errors.New("scheduler: --pod-max-in-unschedulable-pods-duration (deprecated upstream) is not supported")
	}
	if o.ks.ConfigFile == "" {
		cfg, err := latest.Default()
		if err != nil {
			return nil, err
		}
		o.ks.ComponentConfig = cfg
		o.ks.ApplyDeprecated()
		o.ks.ApplyLeaderElectionTo(cfg)
	} else {
		cfg, err := options.LoadConfigFromFile(klog.Background(), o.ks.ConfigFile)
		if err != nil {
			return nil, fmt.Errorf("--config: %w", err)
		}
		o.ks.ApplyLeaderElectionTo(cfg)
		// kube-scheduler ignores --kubeconfig beside --config; sqlkube lets
		// it fill a configuration that names no kubeconfig.
		if cfg.ClientConnection.Kubeconfig == "" {
			cfg.ClientConnection.Kubeconfig = o.ks.Deprecated.Kubeconfig
		}
	}
	if err := validation.ValidateKubeSchedulerConfiguration(o.ks.ComponentConfig); err != nil {
		return nil, fmt.Errorf("scheduler configuration: %w", err)
	}
	return o.ks.ComponentConfig, nil
}

// WriteConfigTo is --write-config-to: write the configuration there and
// exit, as kube-scheduler does ("" when not given).
func (o *Options) WriteConfigTo() string { return o.ks.WriteConfigTo }

// WriteConfig writes cc (with every profile's defaults) to
// --write-config-to.
func (o *Options) WriteConfig(cc *schedconfig.KubeSchedulerConfiguration) error {
	return options.LogOrWriteConfig(klog.Background(), o.ks.WriteConfigTo, cc, cc.Profiles)
}

// RESTConfig is the client configuration of a scheduler run as its own
// process: --master and the kubeconfig of --kubeconfig or the
// configuration's clientConnection.
func (o *Options) RESTConfig(cc *schedconfig.KubeSchedulerConfiguration) (*rest.Config, error) {
	path := cc.ClientConnection.Kubeconfig
	if path == "" && o.ks.Master == "" {
		return nil, errors.New("scheduler: give --kubeconfig (or clientConnection.kubeconfig in --config)")
	}
	cfg, err := clientcmd.BuildConfigFromFlags(o.ks.Master, path)
	if err != nil {
		return nil, fmt.Errorf("scheduler: %w", err)
	}
	return cfg, nil
}

// Run schedules pods over cfg until ctx ends, while p's Elector says this
// process may, or else, when leader election is on, while it holds the
// scheduler's Lease (p.Recampaign: stand again after losing it rather
// than return election.ErrLost).
//
// rm, if not nil, serves /metrics/resources while this process schedules.
func Run(ctx context.Context, cfg *rest.Config, cc *schedconfig.KubeSchedulerConfiguration, p election.Policy, rm *ResourceMetrics) error {
	cfg = rest.CopyConfig(cfg)
	cfg.DisableCompression = true
	cfg.QPS, cfg.Burst = cc.ClientConnection.QPS, int(cc.ClientConnection.Burst)
	if cc.ClientConnection.ContentType != "" {
		cfg.ContentType = cc.ClientConnection.ContentType
	}
	cfg.AcceptContentTypes = cc.ClientConnection.AcceptContentTypes
	el := p.Elector
	if el == nil {
		le := cc.LeaderElection
		if !le.LeaderElect {
			return schedule(ctx, cfg, cc, rm)
		}
		el = election.Lease(election.Options{
			Config: cfg, Namespace: le.ResourceNamespace, Name: le.ResourceName,
			LeaseDuration: le.LeaseDuration.Duration, RenewDeadline: le.RenewDeadline.Duration, RetryPeriod: le.RetryPeriod.Duration,
			Recampaign: p.Recampaign,
		})
	}
	var runErr error
	err := el.Run(ctx, func(ctx context.Context) {
		if err := schedule(ctx, cfg, cc, rm); err != nil {
			klog.FromContext(ctx).Error(err, "scheduler stopped")
			runErr = err
		}
	})
	if runErr != nil {
		return runErr
	}
	return err
}

// schedule builds a scheduler with its own informers and runs it until ctx
// ends, as kube-scheduler does once it leads.
func schedule(ctx context.Context, cfg *rest.Config, cc *schedconfig.KubeSchedulerConfiguration, rm *ResourceMetrics) error {
	client, err := kubernetes.NewForConfig(rest.AddUserAgent(cfg, "scheduler"))
	if err != nil {
		return fmt.Errorf("scheduler: %w", err)
	}
	eventClient, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("scheduler: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("scheduler: %w", err)
	}
	broadcaster := events.NewEventBroadcasterAdapterWithContext(ctx, eventClient)
	// No informer name: kube-scheduler reserves "kube-scheduler" for its
	// informer metrics, a process-wide name that only Shutdown releases, and
	// this process may lead, lose and lead again.
	informers := k8sscheduler.NewInformerFactory(client, 0, nil)
	dynInformers := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 0, "", nil)
	sched, err := k8sscheduler.New(ctx, client, informers, dynInformers,
		profile.RecorderFactory(func(name string) events.EventRecorderLogger { return broadcaster.NewRecorder(name) }),
		k8sscheduler.WithComponentConfigVersion(cc.TypeMeta.APIVersion),
		k8sscheduler.WithKubeConfig(cfg),
		k8sscheduler.WithProfiles(cc.Profiles...),
		k8sscheduler.WithPercentageOfNodesToScore(cc.PercentageOfNodesToScore),
		k8sscheduler.WithPodMaxBackoffSeconds(cc.PodMaxBackoffSeconds),
		k8sscheduler.WithPodInitialBackoffSeconds(cc.PodInitialBackoffSeconds),
		k8sscheduler.WithExtenders(cc.Extenders...),
		k8sscheduler.WithParallelism(cc.Parallelism),
	)
	if err != nil {
		return fmt.Errorf("scheduler: %w", err)
	}
	broadcaster.StartRecordingToSink(ctx.Done())
	defer broadcaster.Shutdown()
	informers.Start(ctx.Done())
	dynInformers.Start(ctx.Done())
	informers.WaitForCacheSync(ctx.Done())
	dynInformers.WaitForCacheSync(ctx.Done())
	if err := sched.WaitForHandlersSync(ctx); err != nil && ctx.Err() == nil {
		return fmt.Errorf("scheduler: %w", err)
	}
	if rm != nil {
		h := resources.Handler(informers.Core().V1().Pods().Lister())
		rm.h.Store(&h)
		defer rm.h.Store(nil)
	}
	sched.Run(ctx)
	informers.Shutdown()
	dynInformers.Shutdown()
	return nil
}

// ResourceMetrics serves kube-scheduler's /metrics/resources: the
// kube_pod_resource_request and kube_pod_resource_limit families of the
// pods the scheduler's informer holds, while this process schedules; and
// nothing otherwise, as kube-scheduler serves nothing there unless it
// leads. Its zero value is ready to use.
type ResourceMetrics struct{ h atomic.Pointer[http.Handler] }

func (r *ResourceMetrics) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if h := r.h.Load(); h != nil {
		(*h).ServeHTTP(w, req)
	}
}
