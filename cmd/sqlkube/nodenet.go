package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/connrotation"

	"github.com/sqlkube/sqlkube/node/kubeproxy"
	"github.com/sqlkube/sqlkube/node/podnet"
)

// nodeNetwork names a node for its network agents.
type nodeNetwork struct {
	dir, name, ip string
	// kubeconfig is the node's credential; a joining node's kubelet
	// writes it once its client certificate is issued.
	kubeconfig string
}

func (f localNodeFlags) kubeProxyOptions(name, ip, kubeconfig string) kubeproxy.Options {
	return kubeproxy.Options{Kubeconfig: kubeconfig, NodeName: name, NodeIP: ip, ExtraArgs: f.kubeProxyArgs}
}

// checkKubeProxy refuses bad --kube-proxy-arg flags before anything starts.
func (f localNodeFlags) checkKubeProxy(name, ip, kubeconfig string) error {
	if f.disableKubeProxy {
		return nil
	}
	return kubeproxy.Check(f.kubeProxyOptions(name, ip, kubeconfig))
}

// startNodeNetwork runs the node's network agents until ctx ends: the pod
// network (its CNI configuration once the node has a pod CIDR, routes to
// the other nodes' pods, masquerading) when sqlkube runs the node's
// containerd, and kube-proxy unless --disable-kube-proxy, once the pod
// network is up. Their failures are logged: the kubelet goes on. The
// returned func waits for them to stop.
func startNodeNetwork(ctx context.Context, f localNodeFlags, n nodeNetwork, log zerolog.Logger) (wait func()) {
	var wg sync.WaitGroup
	proxyLog := log // kube-proxy's own lines name the node
	log = log.With().Str("node", n.name).Logger()
	runProxy := func() {
		if f.disableKubeProxy {
			return
		}
		wg.Go(func() {
			defer utilruntime.HandleCrash() // a panic stops this agent only
			log.Info().Msg("starting kube-proxy")
			o := f.kubeProxyOptions(n.name, n.ip, n.kubeconfig)
			o.Command, o.Log = kubeProxyCommand(proxyLog), proxyLog
			if err := kubeproxy.Run(ctx, o); err != nil {
				log.Error().Err(err).Msg("kube-proxy stopped: Services do not reach this node's pods")
			}
		})
	}
	wg.Go(func() {
		defer utilruntime.HandleCrash()
		client, closeClient, err := nodeClient(ctx, n.kubeconfig)
		if err != nil {
			if ctx.Err() == nil {
				log.Error().Err(err).Msg("no pod network, no kube-proxy")
			}
			return
		}
		defer closeClient()
		if f.runtimeEndpoint != "" {
			// The runtime and its pod network are the operator's.
			runProxy()
			return
		}
		err = podnet.Run(ctx, client, podnet.Options{
			NodeName: n.name, CNIConfDir: cniConfDir(n.dir), IPAMDir: cniIPAMDir(n.dir),
			OnPodCIDR: func(string) { runProxy() }, Log: log,
		})
		if errors.Is(err, podnet.ErrNoPodCIDR) {
			log.Warn().Err(err).Msg("the node never got a pod CIDR: its pods had no network")
		} else if err != nil && ctx.Err() == nil {
			log.Error().Err(err).Msg("pod network agent stopped")
		}
	})
	return wg.Wait
}

// kubeProxyCommand runs kube-proxy in a child process of this binary (the
// hidden `sqlkube kube-proxy`), to which kubeproxy.Run appends its flags.
func kubeProxyCommand(log zerolog.Logger) []string { return childCommand(log, "kube-proxy", "--") }

// kubeProxyQuiet are kube-proxy's warnings of what is normal at its
// start, logged at debug level (docs/logging.md): its nftables proxier's
// first sync lists the sets of its table before the table exists.
var kubeProxyQuiet = []quietLine{
	{message: "Failed to list existing sets", err: "no such file or directory"},
}

// newKubeProxyCommand is `sqlkube kube-proxy -- FLAGS`: Kubernetes'
// kube-proxy with its own flags, in the process the node agent starts
// for it (kubeproxy.Run), which may end on its own.
func newKubeProxyCommand(lf *logFlags) *cobra.Command {
	return &cobra.Command{
		Use:    "kube-proxy -- KUBE-PROXY-FLAGS",
		Short:  "Run Kubernetes' kube-proxy (started by a node agent in its own process)",
		Hidden: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			log, err := stderrLogger(lf)
			if err != nil {
				return err
			}
			// Why kube-proxy ends itself, at info level: its supervisor
			// reads it (kubeproxy.Notices).
			routeKlogQuiet(log, kubeproxy.Notices, kubeProxyQuiet)
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			return kubeproxy.RunInProcess(ctx, args)
		},
	}
}

// nodeClient is a client with the node's credential, once its kubeconfig
// and the certificate it names can be read. A joining node's kubelet
// writes its kubeconfig before it has the certificate (TLS bootstrap: the
// kubeconfig names where the certificate will be once its CSR is
// approved), and it does so in its own process, so only the files tell.
// The func it returns closes the client's connections: an API server
// that stops waits a second for its clients to close theirs, and this
// process may be that server.
func nodeClient(ctx context.Context, kubeconfig string) (kubernetes.Interface, func(), error) {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err == nil {
			cfg.UserAgent = "sqlkube-podnet"
			d := connrotation.NewDialer((&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext)
			cfg.Dial = d.DialContext
			cs, err := kubernetes.NewForConfig(cfg)
			return cs, d.CloseAll, err
		}
		select {
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("the node's kubeconfig: %w (%v)", ctx.Err(), err)
		case <-tick.C:
		}
	}
}
