package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/sqlkube/sqlkube/controlplane"
	"github.com/sqlkube/sqlkube/node/fake"
)

type nodeFlags struct {
	fake          bool
	kubeconfig    string
	count         int
	namePrefix    string
	labels        string
	taints        string
	capacity      string
	qps           float32
	burst         int
	printRBAC     bool
	rbacUser      string
	pprofAddress  string
	podStartDelay time.Duration
	// join: a real node (without --fake).
	join joinFlags
}

func newNodeCommand(lf *logFlags) *cobra.Command {
	f := &nodeFlags{}
	cmd := &cobra.Command{
		Use:   "node [--fake | --server URL --token TOKEN --ca-cert-hash sha256:HEX | --kubeconfig F]",
		Short: "Run a node for this host that joins a cluster (kubelet over containerd), or simulated nodes (--fake)",
		Long: `node --server URL --token TOKEN --ca-cert-hash sha256:HEX joins this host to a cluster
as kubeadm's kubelet TLS bootstrap does: Kubernetes' kubelet over the containerd
it starts (as sqlkube server's own node), with client and serving certificates
issued through CSRs. --kubeconfig F uses an existing node credential instead.

node --fake registers --count Node objects (PREFIX0 … PREFIX(N-1)) through any
Kubernetes API server and keeps them Ready with Leases and status updates as
kubelets do. Pods bound to them run at once (no containers): Running with an
IP, then Succeeded or Failed when annotated fake.sqlkube.io/succeed-after or
fake.sqlkube.io/fail-after (a Job's pods succeed after 1s). Deleted pods are
confirmed gone. SIGTERM stops the heartbeats; the Node objects stay.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.printRBAC {
				return printFakeNodeRBAC(cmd.OutOrStdout(), f.rbacUser)
			}
			if !f.fake {
				log, err := stderrLogger(lf)
				if err != nil {
					return err
				}
				ctx, stop := signalContext(cmd.Context())
				defer stop()
				var extra []string
				if f.labels != "" {
					extra = append(extra, "--node-labels="+f.labels)
				}
				if f.taints != "" {
					extra = append(extra, "--register-with-taints="+f.taints)
				}
				if f.kubeconfig != "" && f.join.token != "" {
					return errors.New("give either --kubeconfig or --token")
				}
				return runJoinedNode(ctx, f.join, f.kubeconfig, extra, log)
			}
			opts, cfg, err := f.options()
			if err != nil {
				return err
			}
			log, err := stderrLogger(lf)
			if err != nil {
				return err
			}
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			if f.pprofAddress != "" {
				stopPprof, err := servePprof(f.pprofAddress)
				if err != nil {
					return err
				}
				defer stopPprof()
			}
			return controlplane.RunFakeNodes(ctx, cfg, opts, log)
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&f.fake, "fake", false, "simulate --count nodes (no containers); without it, run a real node for this host (kubelet over containerd)")
	addLocalNodeFlags(fl, &f.join.localNodeFlags, false)
	fl.StringVar(&f.join.server, "server", "", "the cluster's API (https://HOST:PORT) to join with --token")
	fl.StringVar(&f.join.token, "token", "", "bootstrap token to join with (`sqlkube token create`): the kubelet gets its certificates through CSRs")
	fl.StringSliceVar(&f.join.caCertHash, "ca-cert-hash", nil, "sha256:HEX of the cluster CA's public key, which --token's discovery must find (`sqlkube token create --print-join-command`)")
	fl.StringVar(&f.join.dataDir, "data-dir", "./sqlkube-node", "a real node's data directory (kubelet, containerd, certificates)")
	fl.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig of the API server (default: $KUBECONFIG)")
	fl.IntVar(&f.count, "count", 1, "number of nodes")
	fl.StringVar(&f.namePrefix, "name-prefix", fake.DefaultNamePrefix, "node names are PREFIX0 … PREFIX(N-1)")
	fl.StringVar(&f.labels, "node-labels", "", "extra node labels, k=v,...")
	fl.StringVar(&f.taints, "node-taints", "", "node taints, key=value:Effect,...")
	fl.StringVar(&f.capacity, "capacity", fake.DefaultCapacity, "each node's capacity and allocatable, resource=quantity,... (extended resources too, e.g. example.com/gpu=2)")
	fl.DurationVar(&f.podStartDelay, "pod-start-delay", 0, "how long a bound pod waits before it runs (e.g. 500ms)")
	fl.Float32Var(&f.qps, "kube-api-qps", 5000, "client requests per second to the API server")
	fl.IntVar(&f.burst, "kube-api-burst", 10000, "client request burst")
	fl.BoolVar(&f.printRBAC, "print-rbac", false, "print the ClusterRole (and its binding to --rbac-user) a credential needs, for kubectl apply -f -, and exit")
	fl.StringVar(&f.rbacUser, "rbac-user", fake.DefaultUser, "user --print-rbac binds")
	fl.StringVar(&f.pprofAddress, "pprof-address", "", "serve net/http/pprof here (debugging)")
	_ = fl.MarkHidden("pprof-address")
	return cmd
}

// options checks the flags and reads the kubeconfig.
func (f *nodeFlags) options() (fake.Options, *rest.Config, error) {
	var o fake.Options
	if !f.fake {
		return o, nil, errors.New("only simulated nodes are implemented: give --fake")
	}
	if f.count < 0 {
		return o, nil, fmt.Errorf("--count %d: must not be negative", f.count)
	}
	if f.qps <= 0 || f.burst <= 0 {
		return o, nil, errors.New("--kube-api-qps and --kube-api-burst must be positive")
	}
	var err error
	if o.Labels, err = fake.ParseLabels(f.labels); err != nil {
		return o, nil, fmt.Errorf("--node-labels: %w", err)
	}
	if o.Taints, err = fake.ParseTaints(f.taints); err != nil {
		return o, nil, fmt.Errorf("--node-taints: %w", err)
	}
	if o.Capacity, err = fake.ParseCapacity(f.capacity); err != nil {
		return o, nil, fmt.Errorf("--capacity: %w", err)
	}
	o.Count, o.NamePrefix, o.PodStartDelay = f.count, f.namePrefix, f.podStartDelay
	path := f.kubeconfig
	if path == "" {
		path = os.Getenv(clientcmd.RecommendedConfigPathEnvVar)
	}
	if path == "" {
		return o, nil, errors.New("give --kubeconfig (or set KUBECONFIG)")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return o, nil, fmt.Errorf("--kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = f.qps, f.burst
	return o, cfg, nil
}

func printFakeNodeRBAC(w io.Writer, user string) error {
	for i, obj := range []any{fake.ClusterRole(), fake.ClusterRoleBinding(user)} {
		b, err := yaml.Marshal(obj)
		if err != nil {
			return err
		}
		if i > 0 {
			fmt.Fprintln(w, "---")
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	return nil
}
