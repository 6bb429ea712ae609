package main

import (
	"fmt"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/kubernetes/cmd/kubeadm/app/util/pubkeypin"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sqlkube/sqlkube/bootstraptoken"
)

// newTokenCommand is `sqlkube token create|list|delete`: bootstrap tokens
// for joining nodes, managed through the running server with the admin
// kubeconfig of its data directory (or --kubeconfig), as `kubeadm token`.
func newTokenCommand() *cobra.Command {
	var dataDir, kubeconfig string
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Create, list and delete bootstrap tokens (for joining nodes)",
	}
	cmd.PersistentFlags().StringVar(&dataDir, "data-dir", "./sqlkube-data", "the server's data directory (its admin kubeconfig is used)")
	cmd.PersistentFlags().StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig to reach the server with (default: DATA_DIR/kubeconfig)")
	client := func() (kubernetes.Interface, error) {
		path := kubeconfig
		if path == "" {
			path = filepath.Join(dataDir, "kubeconfig")
		}
		cfg, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			return nil, fmt.Errorf("reading the kubeconfig: %w", err)
		}
		return kubernetes.NewForConfig(cfg)
	}

	var opts bootstraptoken.Options
	var printJoin bool
	create := &cobra.Command{
		Use:   "create [TOKEN]",
		Short: "Create a bootstrap token and print it (random unless TOKEN is given)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cs, err := client()
			if err != nil {
				return err
			}
			if len(args) == 1 {
				opts.Token = args[0]
			}
			token, err := bootstraptoken.Create(cmd.Context(), cs, opts)
			if err != nil {
				return err
			}
			if !printJoin {
				fmt.Fprintln(cmd.OutOrStdout(), token)
				return nil
			}
			path := kubeconfig
			if path == "" {
				path = filepath.Join(dataDir, "kubeconfig")
			}
			cfg, err := clientcmd.BuildConfigFromFlags("", path)
			if err != nil {
				return err
			}
			caPEM := cfg.CAData
			if len(caPEM) == 0 && cfg.CAFile != "" {
				if caPEM, err = os.ReadFile(cfg.CAFile); err != nil {
					return err
				}
			}
			cas, err := certutil.ParseCertsPEM(caPEM)
			if err != nil || len(cas) == 0 {
				return fmt.Errorf("the kubeconfig's CA: %v", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "sqlkube node --server %s --token %s --ca-cert-hash %s\n", cfg.Host, token, pubkeypin.Hash(cas[0]))
			return nil
		},
	}
	create.Flags().BoolVar(&printJoin, "print-join-command", false, "print the `sqlkube node` command that joins a node with the token (the API's address as the kubeconfig names it, the CA's hash)")
	create.Flags().DurationVar(&opts.TTL, "ttl", 24*time.Hour, "how long the token lives (0: for ever)")
	create.Flags().StringVar(&opts.Description, "description", "", "a note stored with the token")
	create.Flags().StringSliceVar(&opts.Usages, "usages", bootstraptoken.DefaultUsages, "what the token may be used for: authentication, signing")
	create.Flags().StringSliceVar(&opts.Groups, "groups", []string{bootstraptoken.DefaultGroup}, "extra groups the token authenticates in (system:bootstrappers:...)")

	list := &cobra.Command{
		Use:   "list",
		Short: "List bootstrap tokens",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cs, err := client()
			if err != nil {
				return err
			}
			tokens, err := bootstraptoken.List(cmd.Context(), cs)
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 8, 3, ' ', 0)
			fmt.Fprintln(w, "TOKEN\tTTL\tEXPIRES\tUSAGES\tDESCRIPTION\tEXTRA GROUPS")
			for _, t := range tokens {
				ttl, expires := "<forever>", "<never>"
				if !t.Expires.IsZero() {
					ttl, expires = "<expired>", t.Expires.Format(time.RFC3339)
					if left := time.Until(t.Expires); left > 0 {
						ttl = duration.ShortHumanDuration(left)
					}
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", t.Token, ttl, expires, strings.Join(t.Usages, ","), orNone(t.Description), strings.Join(t.Groups, ","))
			}
			return w.Flush()
		},
	}

	del := &cobra.Command{
		Use:   "delete TOKEN_OR_ID...",
		Short: "Delete bootstrap tokens (by ID or whole token)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cs, err := client()
			if err != nil {
				return err
			}
			for _, a := range args {
				if err := bootstraptoken.Delete(cmd.Context(), cs, a); err != nil {
					return err
				}
				id, _, _ := strings.Cut(a, ".")
				fmt.Fprintf(cmd.OutOrStdout(), "bootstrap token %q deleted\n", id)
			}
			return nil
		},
	}
	cmd.AddCommand(create, list, del)
	return cmd
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}
