package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/sqlkube/sqlkube/controllers/manager"
	"github.com/sqlkube/sqlkube/election"
	"github.com/sqlkube/sqlkube/internal/endpoint"
	"github.com/sqlkube/sqlkube/scheduler"
)

// newControllerManagerCommand is `sqlkube controller-manager`: Kubernetes'
// controllers as their own process against any API server, with
// kube-controller-manager's flags.
func newControllerManagerCommand(lf *logFlags) *cobra.Command {
	o, err := manager.NewOptions()
	if err != nil {
		panic(err) // only kube-controller-manager's built-in defaults can fail here
	}
	var metricsAddr string
	cmd := &cobra.Command{
		Use:   "controller-manager",
		Short: "Run Kubernetes' controllers against an API server (kube-controller-manager's flags)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := stderrLogger(lf)
			if err != nil {
				return err
			}
			if err := noEndpointFlags(cmd); err != nil {
				return err
			}
			if o.Kubeconfig() == "" {
				return errors.New("give --kubeconfig")
			}
			cfg, err := clientcmd.BuildConfigFromFlags("", o.Kubeconfig())
			if err != nil {
				return fmt.Errorf("--kubeconfig: %w", err)
			}
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			if err := serveMetrics(ctx, metricsAddr, log); err != nil {
				return err
			}
			log.Info().Str("kubeconfig", o.Kubeconfig()).Msg("controller manager starting")
			err = manager.Run(ctx, cfg, o, election.Policy{})
			log.Info().Msg("controller manager stopped")
			return err
		},
	}
	cmd.Flags().AddFlagSet(o.FlagSet())
	for _, name := range endpoint.Flags {
		_ = cmd.Flags().MarkHidden(name)
	}
	cmd.Flags().StringVar(&metricsAddr, "metrics-address", "", "serve Prometheus /metrics and /healthz over HTTP here (host:port; empty: off)")
	return cmd
}

// newSchedulerCommand is `sqlkube scheduler`: Kubernetes' scheduler as its
// own process against any API server, with kube-scheduler's --config and
// flags.
func newSchedulerCommand(lf *logFlags) *cobra.Command {
	o := scheduler.NewOptions()
	var metricsAddr string
	cmd := &cobra.Command{
		Use:   "scheduler",
		Short: "Run Kubernetes' scheduler against an API server (kube-scheduler's --config and flags)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := stderrLogger(lf)
			if err != nil {
				return err
			}
			if err := noEndpointFlags(cmd); err != nil {
				return err
			}
			sc, err := o.Config()
			if err != nil {
				return err
			}
			if o.WriteConfigTo() != "" {
				return o.WriteConfig(sc)
			}
			cfg, err := o.RESTConfig(sc)
			if err != nil {
				return err
			}
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			if err := serveMetrics(ctx, metricsAddr, log); err != nil {
				return err
			}
			log.Info().Msg("scheduler starting")
			err = scheduler.Run(ctx, cfg, sc, election.Policy{}, nil)
			log.Info().Msg("scheduler stopped")
			return err
		},
	}
	cmd.Flags().AddFlagSet(o.FlagSet())
	for _, name := range endpoint.Flags {
		_ = cmd.Flags().MarkHidden(name)
	}
	cmd.Flags().StringVar(&metricsAddr, "metrics-address", "", "serve Prometheus /metrics and /healthz over HTTP here (host:port; empty: off)")
	return cmd
}

// noEndpointFlags refuses the HTTPS endpoint's flags (endpoint.Flags) on
// a component run as its own process, which serves its metrics on
// --metrics-address instead: those flags are for `sqlkube server`'s
// in-process components (--kube-controller-manager-arg,
// --kube-scheduler-arg).
func noEndpointFlags(cmd *cobra.Command) error {
	for _, name := range endpoint.Flags {
		if cmd.Flags().Changed(name) {
			return fmt.Errorf("--%s: a %s run on its own serves /metrics over HTTP on --metrics-address", name, cmd.Name())
		}
	}
	return nil
}

// serveMetrics serves the process's metrics (Kubernetes' registry: work
// queues, leader election, scheduling) on addr until ctx ends.
func serveMetrics(ctx context.Context, addr string, log zerolog.Logger) error {
	if addr == "" {
		return nil
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--metrics-address: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", legacyregistry.Handler())
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(l) }()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
	}()
	log.Info().Str("address", "http://"+l.Addr().String()).Msg("serving metrics")
	return nil
}
