package app

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"github.com/edgeplane/edgeplane/internal/logfilter"
	"github.com/edgeplane/edgeplane/pkg/bootstrap"
	"github.com/edgeplane/edgeplane/pkg/sdnotify"
)

func newServerCommand() *cobra.Command {
	o := bootstrap.NewOptions()
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run the control plane: API server chain, datastore and certificates",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := readConfig(cmd); err != nil {
				return err
			}
			completed, err := o.Complete()
			if err != nil {
				return err
			}
			if errs := completed.Validate(); len(errs) > 0 {
				return invalidFlags(errs)
			}
			return bootstrap.Run(runContext(cmd, "edgeplane"), completed)
		},
	}
	o.AddFlags(cmd.Flags())
	addConfigFlag(cmd.Flags())
	return cmd
}

// readConfig loads the config file into the command's flags and logs which
// files it read. Then, with the verbosity final (the file may set it), the
// long-running commands' default output (-v 0) is kept to edgeplane's own
// lines and upstream's warnings and errors (internal/logfilter); other
// commands, kubectl above all, whose -v is its own, log as upstream does.
func readConfig(cmd *cobra.Command) error {
	files, err := loadConfig(cmd)
	if err != nil {
		return err
	}
	logfilter.Install(os.Stderr)
	if len(files) > 0 {
		klog.InfoS("Read config", "files", files)
	}
	return nil
}

// runContext is the context a long-running command runs in: cancelled on
// the first signal, with its named logger and systemd's notify socket.
func runContext(cmd *cobra.Command, logger string) context.Context {
	ctx := signalContext(cmd.Context())
	ctx = klog.NewContext(ctx, klog.Background().WithName(logger))
	return sdnotify.NewContext(ctx, sdnotify.TakeFromEnvironment())
}

// invalidFlags lists every flag problem, one per line.
func invalidFlags(errs []error) error {
	if len(errs) == 1 {
		return fmt.Errorf("invalid flag: %w", errs[0])
	}
	lines := make([]string, 0, len(errs))
	for _, err := range errs {
		lines = append(lines, "  "+err.Error())
	}
	return fmt.Errorf("invalid flags, %d problems:\n%s", len(errs), strings.Join(lines, "\n"))
}

// signalContext is cancelled on the first SIGTERM or SIGINT, which starts a
// graceful shutdown; a second signal exits at once.
func signalContext(parent context.Context) context.Context {
	if parent == nil {
		parent = context.Background()
	}
	ctx, cancel := context.WithCancelCause(parent)
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		sig := <-ch
		klog.InfoS("Received signal, shutting down gracefully (send it again to exit at once)", "signal", sig.String())
		cancel(errors.New("signal " + sig.String()))
		sig = <-ch
		klog.InfoS("Received second signal, exiting at once", "signal", sig.String())
		klog.Flush()
		os.Exit(1)
	}()
	return ctx
}
