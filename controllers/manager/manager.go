// Package manager runs Kubernetes' own controller manager
// (k8s.io/kubernetes/cmd/kube-controller-manager/app) as a library: every
// controller kube-controller-manager runs, chosen with its --controllers
// syntax and configured with its flags, over any rest.Config (sqlkube
// server's loopback, or a kubeconfig), under leader election on the Lease
// kube-system/kube-controller-manager.
package manager

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	v1core "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/keyutil"
	genericcontrollermanager "k8s.io/controller-manager/app"
	"k8s.io/controller-manager/pkg/clientbuilder"
	controllerhealthz "k8s.io/controller-manager/pkg/healthz"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
	kcmconfig "k8s.io/kubernetes/cmd/kube-controller-manager/app/config"
	"k8s.io/kubernetes/cmd/kube-controller-manager/app/options"
	"k8s.io/kubernetes/cmd/kube-controller-manager/names"
	serviceaccountcontroller "k8s.io/kubernetes/pkg/controller/serviceaccount"
	"k8s.io/kubernetes/pkg/serviceaccount"

	corev1 "k8s.io/api/core/v1"

	"github.com/sqlkube/sqlkube/election"
	"github.com/sqlkube/sqlkube/internal/endpoint"
)

// Options are kube-controller-manager's own options: every flag it takes,
// and of its HTTPS endpoint's, where it listens and its certificate
// (endpoint.Flags; sqlkube serves the endpoint itself).
type Options struct {
	kcm   *options.KubeControllerManagerOptions
	flags *pflag.FlagSet
	// discovery, when set, tells the controllers' discovery clients when
	// to read discovery again (SetDiscoveryGeneration).
	discovery Generation
}

// SetDiscoveryGeneration has the controllers' discovery clients (those of
// the resource-quota and garbage-collector controllers, which read the
// whole of discovery every 30 s) keep what they read until g changes, or
// while g cannot tell, read it on every call as upstream does. For
// controllers in the API server's process (g is its
// DiscoveryGeneration).
func (o *Options) SetDiscoveryGeneration(g Generation) { o.discovery = g }

// servedElsewhere are kube-controller-manager's flag sets sqlkube does not
// take whole: its HTTPS endpoint's (of which it takes endpoint.Flags) with
// delegated authentication (the endpoint asks the API server in process),
// and klog's options (sqlkube logs through zerolog).
var servedElsewhere = map[string]bool{"secure serving": true, "authentication": true, "authorization": true, "logs": true, "metrics": true}

// NewOptions returns kube-controller-manager's defaults.
func NewOptions() (*Options, error) {
	kcm, err := options.NewKubeControllerManagerOptions()
	if err != nil {
		return nil, err
	}
	o := &Options{kcm: kcm, flags: pflag.NewFlagSet("kube-controller-manager", pflag.ContinueOnError)}
	fss := kcm.Flags(app.KnownControllers(), app.ControllersDisabledByDefault(), app.ControllerAliases())
	for _, name := range fss.Order {
		if !servedElsewhere[name] {
			o.flags.AddFlagSet(fss.FlagSets[name])
		}
	}
	endpoint.AddFlags(o.flags, fss.FlagSets["secure serving"])
	return o, nil
}

// Endpoint is where the controller manager's HTTPS endpoint listens
// (upstream's 10257 on every address unless --secure-port and
// --bind-address say otherwise; none with --secure-port=0) and the
// certificate it serves (--tls-cert-file, --tls-private-key-file).
func (o *Options) Endpoint() endpoint.Address { return endpoint.FromOptions(o.kcm.SecureServing) }

// FlagSet holds kube-controller-manager's flags (--controllers,
// --leader-elect*, --node-monitor-grace-period, ...), to add to a command
// or to Parse.
func (o *Options) FlagSet() *pflag.FlagSet { return o.flags }

// Parse sets options from kube-controller-manager style arguments
// ("--controllers=*,-ttl-controller").
func (o *Options) Parse(args []string) error {
	if err := o.flags.Parse(args); err != nil {
		return fmt.Errorf("controller manager: %w", err)
	}
	return nil
}

// Set sets one flag unless it was given explicitly.
func (o *Options) Set(name, value string) error {
	f := o.flags.Lookup(name)
	if f == nil {
		return fmt.Errorf("controller manager: no flag --%s", name)
	}
	if f.Changed {
		return nil
	}
	return o.flags.Set(name, value)
}

// Kubeconfig is --kubeconfig's value ("" when not given).
func (o *Options) Kubeconfig() string { return o.kcm.Generic.ClientConnection.Kubeconfig }

// Run runs the enabled controllers over cfg until ctx ends, while p's
// Elector says this process may, or else, with leader election on (the
// default, --leader-elect), while it holds the Lease the --leader-elect*
// flags name; p.Recampaign keeps standing after losing that Lease
// instead of returning election.ErrLost.
func Run(ctx context.Context, cfg *rest.Config, o *Options, p election.Policy) error {
	all, disabled, aliases := app.KnownControllers(), app.ControllersDisabledByDefault(), app.ControllerAliases()
	if err := o.kcm.Validate(all, disabled, aliases); err != nil {
		return fmt.Errorf("controller manager: %w", err)
	}
	cfg = rest.CopyConfig(cfg)
	cc := o.kcm.Generic.ClientConnection
	cfg.QPS, cfg.Burst = cc.QPS, int(cc.Burst)
	if cc.ContentType != "" {
		cfg.ContentType = cc.ContentType
	}
	cfg.AcceptContentTypes = cc.AcceptContentTypes
	client, err := kubernetes.NewForConfig(rest.AddUserAgent(cfg, options.KubeControllerManagerUserAgent))
	if err != nil {
		return fmt.Errorf("controller manager: %w", err)
	}
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	c := &kcmconfig.Config{
		Client: client, Kubeconfig: cfg, EventBroadcaster: broadcaster,
		EventRecorder:            broadcaster.NewRecorder(clientgoscheme.Scheme, corev1.EventSource{Component: options.KubeControllerManagerUserAgent}),
		ComponentGlobalsRegistry: o.kcm.ComponentGlobalsRegistry,
	}
	// The endpoint is sqlkube's to serve (controlplane): upstream's
	// options would listen on it themselves.
	kcm := *o.kcm
	ss := *kcm.SecureServing
	ss.BindPort = 0
	kcm.SecureServing = &ss
	if err := kcm.ApplyTo(c, all, disabled, aliases); err != nil {
		return fmt.Errorf("controller manager: %w", err)
	}
	completed := c.Complete()
	broadcaster.StartRecordingToSink(&v1core.EventSinkImpl{Interface: client.CoreV1().Events("")})
	defer broadcaster.Shutdown()

	el := p.Elector
	if el == nil {
		le := completed.ComponentConfig.Generic.LeaderElection
		if !le.LeaderElect {
			return runControllers(ctx, completed, o.discovery)
		}
		el = election.Lease(election.Options{
			Config: cfg, Namespace: le.ResourceNamespace, Name: le.ResourceName,
			LeaseDuration: le.LeaseDuration.Duration, RenewDeadline: le.RenewDeadline.Duration, RetryPeriod: le.RetryPeriod.Duration,
			Recampaign: p.Recampaign,
		})
	}
	var runErr error
	err = el.Run(ctx, func(ctx context.Context) {
		if err := runControllers(ctx, completed, o.discovery); err != nil {
			klog.FromContext(ctx).Error(err, "controller manager stopped")
			runErr = err
		}
	})
	if runErr != nil {
		return runErr
	}
	return err
}

// runControllers starts every enabled controller, as kube-controller-
// manager does once it leads, and blocks until ctx ends. With a
// generation, the controllers' discovery clients are cached by it
// (cachingBuilder).
func runControllers(ctx context.Context, c *kcmconfig.CompletedConfig, generation Generation) error {
	root := clientbuilder.SimpleControllerClientBuilder{ClientConfig: c.Kubeconfig}
	var builder clientbuilder.ControllerClientBuilder = root
	if c.ComponentConfig.KubeCloudShared.UseServiceAccountCredentials {
		builder = clientbuilder.NewDynamicClientBuilder(rest.AnonymousClientConfig(c.Kubeconfig), c.Client.CoreV1(), "kube-system")
	}
	if generation != nil {
		builder = cachingBuilder{ControllerClientBuilder: builder, generation: generation}
	}
	// CreateControllerContext reserves the process-wide informer name
	// "kube-controller-manager" (others in the same process take names of
	// their own: createControllerContext), which only the informer
	// factory's Shutdown releases; if it fails after the reservation (its 10 s wait for a
	// healthy API server), the name stays taken and every later term as
	// leader in this process would fail. Waiting here first leaves that
	// wait nothing to time out on.
	if err := genericcontrollermanager.WaitForAPIServer(c.Client, time.Minute); err != nil {
		return fmt.Errorf("controller manager: %w", err)
	}
	cctx, err := createControllerContext(ctx, c, root, builder)
	if err != nil {
		return fmt.Errorf("controller manager: %w", err)
	}
	defer cctx.InformerFactory.Shutdown()
	// Informers started before every controller is built (the tokens
	// controller's) stop only once building is over: a controller
	// cannot add its handler to a stopped informer, and upstream's
	// constructors do not check that error (NewServiceAccountsController
	// panics on it when a tenant stops while it starts).
	stop, built := make(chan struct{}), make(chan struct{})
	doneBuilding := sync.OnceFunc(func() { close(built) })
	defer doneBuilding()
	go func() {
		<-ctx.Done()
		<-built
		close(stop)
	}()
	descriptors := app.NewControllerDescriptors()
	// The service-account token controller comes first, with the root
	// client, as upstream starts it (its descriptor cannot be built from
	// outside kube-controller-manager's package).
	if cctx.IsControllerEnabled(descriptors[names.ServiceAccountTokenController]) {
		if err := startTokensController(ctx, cctx, root, stop); err != nil {
			return err
		}
	}
	// Its placeholder descriptor (no client builder) must not be built.
	delete(descriptors, names.ServiceAccountTokenController)
	// The ValidatingAdmissionPolicy status controller is built here, with
	// the process's one copy of the built-in schemas (newVAPStatusController).
	vapStatus := cctx.IsControllerEnabled(descriptors[names.ValidatingAdmissionPolicyStatusController])
	delete(descriptors, names.ValidatingAdmissionPolicyStatusController)
	controllers, err := app.BuildControllers(ctx, cctx, descriptors, nil, controllerhealthz.NewMutableHealthzHandler())
	if err == nil && vapStatus {
		var c app.Controller
		if c, err = newVAPStatusController(cctx); err == nil {
			controllers = append(controllers, c)
		}
	}
	doneBuilding()
	if err != nil {
		return fmt.Errorf("controller manager: %w", err)
	}
	for i, c := range controllers {
		controllers[i] = namedLogger{c}
	}
	cctx.InformerFactory.Start(ctx.Done())
	cctx.ObjectOrMetadataInformerFactory.Start(ctx.Done())
	close(cctx.InformersStarted)
	if len(controllers) == 0 {
		<-ctx.Done()
		return nil
	}
	if !app.RunControllers(ctx, cctx, controllers, app.ControllerStartJitter, c.ControllerShutdownTimeout) {
		return errors.New("controller manager: controllers did not stop within --controller-shutdown-timeout")
	}
	return nil
}

// namedLogger runs a controller with its logger named after it
// (logger=endpoints-controller), as it was built: since 1.37 upstream
// names it only while building, and what a controller logs as it runs, a
// recovered panic included (internal/panics), would not say whose it is.
type namedLogger struct{ app.Controller }

func (c namedLogger) Run(ctx context.Context) {
	c.Controller.Run(klog.NewContext(ctx, klog.LoggerWithName(klog.FromContext(ctx), c.Name())))
}

// startTokensController runs Kubernetes' tokens controller, which fills
// kubernetes.io/service-account-token secrets, when
// --service-account-private-key-file names a key.
func startTokensController(ctx context.Context, cctx app.ControllerContext, root clientbuilder.ControllerClientBuilder, stop <-chan struct{}) error {
	sa := cctx.ComponentConfig.SAController
	if sa.ServiceAccountKeyFile == "" {
		klog.FromContext(ctx).Info("Controller is disabled because there is no private key", "controller", names.ServiceAccountTokenController)
		return nil
	}
	key, err := keyutil.PrivateKeyFromFile(sa.ServiceAccountKeyFile)
	if err != nil {
		return fmt.Errorf("--service-account-private-key-file: %w", err)
	}
	var rootCA []byte
	if sa.RootCAFile != "" {
		if rootCA, err = os.ReadFile(sa.RootCAFile); err != nil {
			return fmt.Errorf("--root-ca-file: %w", err)
		}
	} else {
		rootCA = root.ConfigOrDie("tokens-controller").CAData
	}
	gen, err := serviceaccount.JWTTokenGenerator(serviceaccount.LegacyIssuer, key)
	if err != nil {
		return fmt.Errorf("service-account token generator: %w", err)
	}
	tokens, err := serviceaccountcontroller.NewTokensController(klog.FromContext(ctx), cctx.InformerFactory.Core().V1().ServiceAccounts(),
		cctx.InformerFactory.Core().V1().Secrets(), root.ClientOrDie("tokens-controller"),
		serviceaccountcontroller.TokensControllerOptions{TokenGenerator: gen, RootCA: rootCA})
	if err != nil {
		return fmt.Errorf("tokens controller: %w", err)
	}
	go tokens.Run(ctx, int(sa.ConcurrentSATokenSyncs))
	cctx.InformerFactory.Start(stop)
	return nil
}
