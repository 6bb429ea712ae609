package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/sqlkube/sqlkube/internal/panics"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

type logFlags struct {
	level  string
	format string
}

func (f *logFlags) logger(w io.Writer) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(f.level)
	if err != nil || f.level == "" {
		return zerolog.Logger{}, fmt.Errorf("invalid --log-level %q: want trace, debug, info, warn or error", f.level)
	}
	switch f.format {
	case "json":
	case "text", "console": // console: the flag's older name for text
		// Colours only for a person at a terminal, never in a file or pipe.
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.RFC3339, NoColor: !isTerminal(w)}
	default:
		return zerolog.Logger{}, fmt.Errorf("invalid --log-format %q: want text or json", f.format)
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger(), nil
}

// isTerminal reports whether w is a file open on a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(interface{ Fd() uintptr })
	return ok && term.IsTerminal(int(f.Fd()))
}

func newRootCommand() *cobra.Command {
	lf := &logFlags{}
	root := &cobra.Command{
		Use:           "sqlkube",
		Short:         "A Kubernetes-compatible control plane whose state lives in SQL",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&lf.level, "log-level", "info", "log level: trace, debug, info, warn, error")
	root.PersistentFlags().StringVar(&lf.format, "log-format", "text", "log format: text (for people; coloured only on a terminal) or json (one object per line)")
	root.AddCommand(newVersionCommand(), newServerCommand(lf), newHostCommand(lf), newTenantCommand(), newAPIServerCommand(lf), newEtcdCommand(lf), newMigrateCommand(), newDatastoreCommand(), newProbeCommand(), newBenchCommand(lf), newCertsCommand(), newTokenCommand(), newNodeCommand(lf), newControllerManagerCommand(lf), newSchedulerCommand(lf))
	root.AddCommand(newImagesCommand(), newKubeProxyCommand(lf), newKubeletCommand(lf), newContainerdCommand(), newCtrCommand())
	root.AddCommand(newResetCommand(lf), newRegistryCommand(lf))
	return root
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintf(cmd.OutOrStdout(), "sqlkube %s (etcd API %s)\n", version, etcdAPIVersion())
			return nil
		},
	}
}

// stderrLogger is the logger of long-running commands, on standard
// error. The logs of the components they embed go to it too (routeLogs),
// and so do the panics those components' goroutines recover, which no
// longer end the process (panics.Contain): every command that embeds a
// Kubernetes component starts here.
func stderrLogger(lf *logFlags) (zerolog.Logger, error) {
	log, err := lf.logger(os.Stderr)
	if err == nil {
		routeLogs(log)
		panics.Contain(log)
	}
	return log, err
}
