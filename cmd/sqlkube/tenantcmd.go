package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sqlkube/sqlkube/tenant"
)

// newTenantCommand is `sqlkube tenant`: a thin CLI over a host's Tenant
// objects (what kubectl does with tenants.sqlkube.io, plus waiting and
// the kubeconfig).
func newTenantCommand() *cobra.Command {
	var dataDir, kubeconfig string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "tenant",
		Short: "Create, list, suspend, resume, move, back up, restore and delete the tenant clusters of a `sqlkube host`",
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&dataDir, "data-dir", "./sqlkube-host", "the host's data directory (its admin kubeconfig is used)")
	pf.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig of the host's API (default: DATA_DIR/kubeconfig)")
	pf.DurationVar(&timeout, "timeout", 2*time.Minute, "how long to wait for the tenant")
	dynClient := func() (dynamic.Interface, kubernetes.Interface, error) {
		path := kubeconfig
		if path == "" {
			path = filepath.Join(dataDir, "kubeconfig")
		}
		cfg, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			return nil, nil, fmt.Errorf("reading the host's kubeconfig: %w", err)
		}
		dyn, err := dynamic.NewForConfig(cfg)
		if err != nil {
			return nil, nil, err
		}
		cs, err := kubernetes.NewForConfig(cfg)
		return dyn, cs, err
	}
	clients := func() (dynamic.ResourceInterface, kubernetes.Interface, error) {
		dyn, cs, err := dynClient()
		if err != nil {
			return nil, nil, err
		}
		return dyn.Resource(tenant.GVR), cs, nil
	}
	var quota, out, ds string
	var suspended bool
	create := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a tenant, wait until it serves and print its admin kubeconfig's path (or write it with --out)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if why := tenant.ValidName(name); why != "" {
				return fmt.Errorf("%q: %s", name, why)
			}
			tenants, cs, err := clients()
			if err != nil {
				return err
			}
			t := &tenant.Tenant{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: tenant.Spec{Suspended: suspended, Datastore: ds}}
			if t.Spec.Quota, err = parseQuota(quota); err != nil {
				return err
			}
			u, err := tenant.ToUnstructured(t)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			if _, err := tenants.Create(ctx, u, metav1.CreateOptions{}); err != nil {
				return err
			}
			want := tenant.PhaseReady
			if suspended {
				want = tenant.PhaseSuspended
			}
			got, err := waitPhase(ctx, tenants, name, want)
			if err != nil {
				return err
			}
			if suspended {
				fmt.Fprintf(cmd.OutOrStdout(), "tenant %s created, suspended (port %d)\n", name, got.Status.Port)
				return nil
			}
			return writeTenantKubeconfig(ctx, cs, got, out, cmd.OutOrStdout())
		},
	}
	create.Flags().StringVar(&quota, "quota", "", "datastore quota, e.g. 512Mi (default: the host's)")
	create.Flags().BoolVar(&suspended, "suspended", false, "create it suspended")
	create.Flags().StringVar(&out, "out", "", "write the admin kubeconfig here (default: print the Secret to read it from)")
	create.Flags().StringVar(&ds, "datastore", "", "the host's datastore to keep its data in (default: the host's default)")

	kc := &cobra.Command{
		Use:   "kubeconfig NAME",
		Short: "Print a tenant's admin kubeconfig (or write it with --out)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			tenants, cs, err := clients()
			if err != nil {
				return err
			}
			t, err := getTenant(cmd.Context(), tenants, args[0])
			if err != nil {
				return err
			}
			if out == "" {
				out = "-"
			}
			return writeTenantKubeconfig(cmd.Context(), cs, t, out, cmd.OutOrStdout())
		},
	}
	kc.Flags().StringVar(&out, "out", "", "write it here (default: standard output)")

	list := &cobra.Command{
		Use:   "list",
		Short: "List the tenants",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			tenants, _, err := clients()
			if err != nil {
				return err
			}
			l, err := tenants.List(cmd.Context(), metav1.ListOptions{})
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 8, 2, ' ', 0)
			fmt.Fprintln(w, "NAME\tPHASE\tENDPOINT\tDATASTORE\tSUSPENDED\tAGE")
			for i := range l.Items {
				t, err := tenant.FromUnstructured(&l.Items[i])
				if err != nil {
					return err
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%v\t%s\n", t.Name, t.Status.Phase, t.Status.Endpoint, t.Status.Datastore, t.Spec.Suspended,
					duration.HumanDuration(time.Since(t.CreationTimestamp.Time)))
			}
			return w.Flush()
		},
	}
	setSuspended := func(use, short string, to bool, want string) *cobra.Command {
		return &cobra.Command{
			Use: use + " NAME", Short: short, Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				tenants, _, err := clients()
				if err != nil {
					return err
				}
				ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
				defer cancel()
				patch := fmt.Appendf(nil, `{"spec":{"suspended":%v}}`, to)
				if _, err := tenants.Patch(ctx, args[0], types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
					return err
				}
				if _, err := waitPhase(ctx, tenants, args[0], want); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "tenant %s %s\n", args[0], map[bool]string{true: "suspended", false: "resumed"}[to])
				return nil
			},
		}
	}
	del := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a tenant with its data, and wait until it is gone",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			tenants, _, err := clients()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			if err := tenants.Delete(ctx, args[0], metav1.DeleteOptions{}); err != nil {
				return err
			}
			err = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
				_, err := tenants.Get(ctx, args[0], metav1.GetOptions{})
				return apierrors.IsNotFound(err), nil
			})
			if err != nil {
				return fmt.Errorf("tenant %s is still being deleted: %w", args[0], err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "tenant %s deleted\n", args[0])
			return nil
		},
	}
	cmd.AddCommand(create, kc, list,
		setSuspended("suspend", "Suspend a tenant: its memory and connections are freed, its data kept; a request to its endpoint resumes it", true, tenant.PhaseSuspended),
		setSuspended("resume", "Resume a suspended tenant", false, tenant.PhaseReady), del,
		newTenantMoveCommand(clients, &timeout), newTenantBackupCommand(dynClient, &timeout), newTenantRestoreCommand(dynClient, &timeout))
	return cmd
}

func getTenant(ctx context.Context, tenants dynamic.ResourceInterface, name string) (*tenant.Tenant, error) {
	u, err := tenants.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return tenant.FromUnstructured(u)
}

// waitPhase waits until tenant name reports phase want (for its latest
// spec), or fails with its message.
func waitPhase(ctx context.Context, tenants dynamic.ResourceInterface, name, want string) (*tenant.Tenant, error) {
	var last *tenant.Tenant
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		t, err := getTenant(ctx, tenants, name)
		if err != nil {
			return false, nil
		}
		last = t
		return t.Status.ObservedGeneration == t.Generation && t.Status.Phase == want, nil
	})
	if err != nil {
		msg := "no status yet"
		if last != nil && last.Status.Phase != "" {
			msg = last.Status.Phase
			if last.Status.Message != "" {
				msg += ": " + last.Status.Message
			}
		}
		return nil, fmt.Errorf("tenant %s is not %s (%s): %w", name, want, msg, err)
	}
	return last, nil
}

// writeTenantKubeconfig writes t's admin kubeconfig to path ("-":
// standard output), or, with no path, says where it is.
func writeTenantKubeconfig(ctx context.Context, cs kubernetes.Interface, t *tenant.Tenant, path string, w io.Writer) error {
	if t.Status.KubeconfigSecret == "" {
		return errors.New("the tenant has no admin kubeconfig yet")
	}
	if path == "" {
		fmt.Fprintf(w, "tenant %s serves at %s\nAdmin kubeconfig: kubectl -n %s get secret %s -o jsonpath='{.data.kubeconfig}' | base64 -d\n  or: sqlkube tenant kubeconfig %s --out FILE\n",
			t.Name, t.Status.Endpoint, tenant.Namespace, t.Status.KubeconfigSecret, t.Name)
		return nil
	}
	s, err := cs.CoreV1().Secrets(tenant.Namespace).Get(ctx, t.Status.KubeconfigSecret, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if path == "-" {
		_, err = w.Write(s.Data["kubeconfig"])
		return err
	}
	if err := os.WriteFile(path, s.Data["kubeconfig"], 0o600); err != nil {
		return err
	}
	fmt.Fprintf(w, "tenant %s serves at %s\nAdmin kubeconfig: %s\n", t.Name, t.Status.Endpoint, path)
	return nil
}

// parseQuota is --quota (nil when not given).
func parseQuota(quota string) (*resource.Quantity, error) {
	if quota == "" {
		return nil, nil
	}
	q, err := resource.ParseQuantity(quota)
	if err != nil {
		return nil, fmt.Errorf("--quota: %w", err)
	}
	return &q, nil
}
