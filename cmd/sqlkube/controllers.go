package main

import (
	"context"
	"crypto"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/controller/certificates/approver"
	"k8s.io/kubernetes/pkg/controller/certificates/rootcacertpublisher"
	"k8s.io/kubernetes/pkg/controller/certificates/signer"
	"k8s.io/kubernetes/pkg/controller/clusterroleaggregation"
	serviceaccountcontroller "k8s.io/kubernetes/pkg/controller/serviceaccount"

	"github.com/sqlkube/sqlkube/apiserver"

	"github.com/sqlkube/sqlkube/controllers/namespace"
	"github.com/sqlkube/sqlkube/controllers/resourcequota"
	"github.com/sqlkube/sqlkube/controllers/serviceaccount"
)

// controllerOptions are what the in-process controllers need besides a
// client.
type controllerOptions struct {
	// ServiceAccountKey signs the tokens of service-account token secrets
	// (Kubernetes' tokens controller); nil: that controller does not run.
	ServiceAccountKey crypto.Signer
	// RootCA is the CA bundle those secrets and every namespace's
	// kube-root-ca.crt ConfigMap carry (nil: no publisher).
	RootCA []byte
	// ClientCACert and ClientCAKey are the files of the CA that signs
	// client certificates CSRs ask for (empty: no signers).
	ClientCACert, ClientCAKey string
}

// clientCertTTL is how long certificates signed for CSRs last (as
// kube-controller-manager's --cluster-signing-duration).
const clientCertTTL = 365 * 24 * time.Hour

// runControllers starts the controllers `sqlkube server` runs in-process
// (namespace, ClusterRole aggregation, service accounts and their token
// secrets, resource quotas) against cfg until ctx ends; the returned wait
// blocks until they have stopped.
func runControllers(ctx context.Context, cfg *rest.Config, log zerolog.Logger, opts controllerOptions) (wait func(), err error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("controllers: %w", err)
	}
	md, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("controllers: %w", err)
	}
	factory := informers.NewSharedInformerFactory(cs, 0)
	ns, err := namespace.New(namespace.Options{Client: cs, Metadata: md, Namespaces: factory.Core().V1().Namespaces()})
	if err != nil {
		return nil, err
	}
	// Kubernetes' own aggregation controller fills admin, edit, view and
	// any aggregated ClusterRole from the roles its selectors match.
	aggregation := clusterroleaggregation.NewClusterRoleAggregation(factory.Rbac().V1().ClusterRoles(), cs.RbacV1())
	// The default service account of every namespace, which the
	// ServiceAccount admission plugin requires of pods.
	accounts, err := serviceaccount.New(serviceaccount.Options{Client: cs, Namespaces: factory.Core().V1().Namespaces(), ServiceAccounts: factory.Core().V1().ServiceAccounts()})
	if err != nil {
		return nil, err
	}
	// ResourceQuotas' status.hard and status.used, which the ResourceQuota
	// admission plugin enforces and charges.
	quotas, err := resourcequota.New(ctx, resourcequota.Options{Client: cs, Metadata: md, Informers: factory})
	if err != nil {
		return nil, err
	}
	names := []string{"namespace", "clusterrole-aggregation", "serviceaccount", "resourcequota"}
	var tokens *serviceaccountcontroller.TokensController
	if opts.ServiceAccountKey != nil {
		// Kubernetes' tokens controller fills secrets of type
		// kubernetes.io/service-account-token (legacy, secret-based
		// tokens) and deletes them with their service account.
		gen, err := apiserver.LegacyTokenGenerator(opts.ServiceAccountKey)
		if err != nil {
			return nil, fmt.Errorf("controllers: %w", err)
		}
		tokens, err = serviceaccountcontroller.NewTokensController(klog.FromContext(ctx), factory.Core().V1().ServiceAccounts(), factory.Core().V1().Secrets(), cs,
			serviceaccountcontroller.TokensControllerOptions{TokenGenerator: gen, RootCA: opts.RootCA})
		if err != nil {
			return nil, fmt.Errorf("controllers: %w", err)
		}
		names = append(names, "serviceaccount-token")
	}
	var publisher *rootcacertpublisher.Publisher
	if len(opts.RootCA) > 0 {
		// kube-root-ca.crt in every namespace: the CA bundle that pods'
		// projected service-account volumes carry.
		if publisher, err = rootcacertpublisher.NewPublisher(factory.Core().V1().ConfigMaps(), factory.Core().V1().Namespaces(), cs, opts.RootCA); err != nil {
			return nil, fmt.Errorf("controllers: %w", err)
		}
		names = append(names, "root-ca-cert-publisher")
	}
	var runCSRs []func()
	if opts.ClientCACert != "" {
		// Node client certificates: CSRs from joining nodes (bootstrap
		// tokens) and nodes renewing are approved when RBAC lets their
		// requester (nodeclient, selfnodeclient), then signed by the
		// client CA, as kube-controller-manager does; other
		// kube-apiserver-client CSRs are signed once someone approves them.
		csrs := factory.Certificates().V1().CertificateSigningRequests()
		approving := approver.NewCSRApprovingController(ctx, cs, csrs)
		kubelet, err := signer.NewKubeletClientCSRSigningController(ctx, cs, csrs, opts.ClientCACert, opts.ClientCAKey, clientCertTTL)
		if err != nil {
			return nil, fmt.Errorf("controllers: %w", err)
		}
		clients, err := signer.NewKubeAPIServerClientCSRSigningController(ctx, cs, csrs, opts.ClientCACert, opts.ClientCAKey, clientCertTTL)
		if err != nil {
			return nil, fmt.Errorf("controllers: %w", err)
		}
		runCSRs = []func(){func() { approving.Run(ctx, 1) }, func() { kubelet.Run(ctx, 1) }, func() { clients.Run(ctx, 1) }}
		names = append(names, "csrapproving", "csrsigning")
	}
	factory.Start(ctx.Done())
	var wg sync.WaitGroup
	for _, run := range runCSRs {
		wg.Go(run)
	}
	wg.Go(func() { ns.Run(ctx, 2) })
	wg.Go(func() { aggregation.Run(ctx, 1) })
	wg.Go(func() { accounts.Run(ctx, 2) })
	wg.Go(func() { quotas.Run(ctx, 2) })
	if tokens != nil {
		wg.Go(func() { tokens.Run(ctx, 1) })
	}
	if publisher != nil {
		wg.Go(func() { publisher.Run(ctx, 1) })
	}
	log.Info().Strs("controllers", names).Msg("controllers started")
	return func() {
		wg.Wait()
		factory.Shutdown()
	}, nil
}
