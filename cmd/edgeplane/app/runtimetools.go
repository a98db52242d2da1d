package app

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/edgeplane/edgeplane/pkg/bootstrap"
	"github.com/edgeplane/edgeplane/pkg/config"
	"github.com/edgeplane/edgeplane/pkg/criruntime"
	"github.com/edgeplane/edgeplane/pkg/node"
)

// runtimeTool is an upstream command-line tool of the container runtime
// (crictl, containerd's ctr) that `edgeplane crictl` and `edgeplane ctr` run
// pointed at the node's runtime. Both are separate binaries: a release
// folder ships them beside edgeplane (install.sh installs them there), else
// they are looked up on the PATH.
type runtimeTool struct {
	name string
	// addressFlags are the tool's global flags (without dashes) that choose
	// the socket, or a file that does; given, edgeplane adds no default.
	addressFlags []string
	// valueFlags are the tool's other global flags that take a value, so
	// that the scan of the global flags skips their values.
	valueFlags []string
	// addressEnv are the environment variables that do what addressFlags do.
	addressEnv []string
	// containerdOnly: the tool speaks containerd's own API, not CRI, so
	// only containerd's sockets are candidates.
	containerdOnly bool
	// env is what the tool is given to use socket, and any other default
	// (each only when the user's environment does not set it).
	env func(socket string) []string
	// hint says how to name a socket to the tool.
	hint string
}

var crictlTool = runtimeTool{
	name:         "crictl",
	addressFlags: []string{"runtime-endpoint", "r", "image-endpoint", "i", "config", "c"},
	valueFlags:   []string{"timeout", "t", "tracing-endpoint", "tracing-sampling-rate-per-million", "profile-cpu", "profile-mem"},
	addressEnv:   []string{"CONTAINER_RUNTIME_ENDPOINT", "IMAGE_SERVICE_ENDPOINT", "CRI_CONFIG_FILE"},
	env: func(socket string) []string {
		// The environment, not a flag: crictl lets its flags win over it.
		return []string{"CONTAINER_RUNTIME_ENDPOINT=unix://" + socket}
	},
	hint: "crictl --runtime-endpoint unix:///path/to/socket (or CONTAINER_RUNTIME_ENDPOINT)",
}

var ctrTool = runtimeTool{
	name:           "ctr",
	addressFlags:   []string{"address", "a"},
	valueFlags:     []string{"namespace", "n", "timeout", "connect-timeout"},
	addressEnv:     []string{"CONTAINERD_ADDRESS"},
	containerdOnly: true,
	env: func(socket string) []string {
		// ctr's flags (--address, -n) win over its environment.
		return []string{"CONTAINERD_ADDRESS=" + socket, "CONTAINERD_NAMESPACE=k8s.io"}
	},
	hint: "ctr --address /path/to/containerd.sock (or CONTAINERD_ADDRESS)",
}

func newCrictlCommand() *cobra.Command { return newRuntimeToolCommand(crictlTool, "CRI") }
func newCtrCommand() *cobra.Command    { return newRuntimeToolCommand(ctrTool, "containerd") }

// newRuntimeToolCommand is `edgeplane crictl` or `edgeplane ctr`. Cobra does
// not parse its flags: every argument goes to the tool but a leading
// --data-dir, which is edgeplane's.
func newRuntimeToolCommand(t runtimeTool, api string) *cobra.Command {
	return &cobra.Command{
		Use: t.name + " [--data-dir DIR] [" + t.name + " arguments]",
		Short: fmt.Sprintf("Run %s against this node's container runtime (default: the managed containerd's "+
			"socket <data-dir>/agent/containerd/containerd.sock, else the host's)", t.name),
		Long: fmt.Sprintf("Runs the %[1]s binary that ships beside edgeplane (else the one on the PATH), with the\n"+
			"%[2]s socket of this node's runtime: <data-dir>/agent/containerd/containerd.sock when it exists\n"+
			"(the containerd that edgeplane runs), else the host's runtime, searched as the node does\n"+
			"(%[3]s).\n"+
			"A socket given to %[1]s by its own flags or environment wins. The data dir is --data-dir\n"+
			"when it comes first, else $%[4]s, else data-dir in %[5]s or %[6]s, else the default.\n"+
			"`edgeplane %[1]s --help` shows edgeplane's help; `edgeplane %[1]s help` shows %[1]s's.",
			t.name, api, strings.Join(t.searchPaths(), ", "), dataDirEnv, config.DefaultPath, agentConfigPath),
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 && (args[0] == "--help" || args[0] == "-h") {
				return cmd.Help()
			}
			dirs, args, err := toolDataDirs(args)
			if err != nil {
				return err
			}
			// --version among the tool's global flags is edgeplane's, as on
			// every command (`edgeplane crictl version` is crictl's).
			asked, err := versionAsked(t.globalFlags(args))
			if err != nil {
				return err
			}
			if asked {
				fmt.Fprint(cmd.OutOrStdout(), versionText())
				return nil
			}
			c, err := t.command(args, dirs, os.Environ())
			if err != nil {
				return err
			}
			// The tool takes over the process: its terminal, signals and
			// exit code are the user's (crictl exec -it).
			return syscall.Exec(c.Path, c.Args, c.Env)
		},
	}
}

// toolDataDirs takes a leading --data-dir DIR (or --data-dir=DIR) off args.
// Without one, the data dirs to look in are the server's (serverDataDir)
// and the agent's (its config file's data-dir), which are one unless the
// config files differ.
func toolDataDirs(args []string) ([]string, []string, error) {
	if len(args) > 0 {
		if dir, ok := strings.CutPrefix(args[0], "--data-dir="); ok {
			if dir == "" {
				return nil, nil, errors.New("--data-dir= is empty: give a directory")
			}
			return []string{dir}, args[1:], nil
		}
		if args[0] == "--data-dir" {
			if len(args) < 2 || args[1] == "" {
				return nil, nil, errors.New("--data-dir needs a directory")
			}
			return []string{args[1]}, args[2:], nil
		}
	}
	dirs := []string{serverDataDir()}
	if os.Getenv(dataDirEnv) == "" {
		if agent := configuredAgentDataDir(agentConfigPath); agent != dirs[0] {
			dirs = append(dirs, agent)
		}
	}
	return dirs, args, nil
}

// configuredAgentDataDir is data-dir in the agent's config file at path
// (and its drop-ins), else the agent's default.
func configuredAgentDataDir(path string) string {
	o := bootstrap.NewAgentOptions()
	fs := pflag.NewFlagSet("agent", pflag.ContinueOnError)
	o.AddFlags(fs)
	fs.Int("v", 0, "")
	fs.String("vmodule", "", "")
	files, err := config.Files(path, false)
	if err != nil || config.Load(fs, files) != nil || o.DataDir == "" {
		return bootstrap.DefaultDataDir()
	}
	return o.DataDir
}

// managedSocket is the socket of the containerd that a node with data dir
// dir runs.
func managedSocket(dir string) string {
	return filepath.Join(dir, node.DirName, "containerd", "containerd.sock")
}

// searchPaths are the host's runtime sockets the tool can speak to, in the
// node's order (pkg/criruntime).
func (t runtimeTool) searchPaths() []string {
	var paths []string
	for _, p := range criruntime.SearchPaths() {
		if t.containerdOnly && !strings.Contains(p, "containerd") {
			continue
		}
		paths = append(paths, p)
	}
	return paths
}

// command makes the tool's command line: its binary, args, and environ
// with the default socket added unless args or environ name one.
func (t runtimeTool) command(args, dataDirs []string, environ []string) (*exec.Cmd, error) {
	bin, err := toolBinary(t.name)
	if err != nil {
		return nil, err
	}
	c := exec.Command(bin, args...)
	c.Env = environ
	if t.addressGiven(args, environ) {
		return c, nil
	}
	var candidates []string
	for _, d := range dataDirs {
		candidates = append(candidates, managedSocket(d))
	}
	socket, err := pickSocket(append(candidates, t.searchPaths()...))
	if err != nil {
		return nil, fmt.Errorf("%s: %w; or name one: %s", t.name, err, t.hint)
	}
	for _, kv := range t.env(socket) {
		name, _, _ := strings.Cut(kv, "=")
		if _, set := lookupEnv(environ, name); !set {
			c.Env = append(c.Env, kv)
		}
	}
	return c, nil
}

// globalFlags are the tool's global flags in args (without their values):
// those before the subcommand, whose flags are its own, or before "--".
func (t runtimeTool) globalFlags(args []string) []string {
	var flags []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || !strings.HasPrefix(a, "-") || a == "-" {
			break
		}
		flags = append(flags, a)
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !hasValue && (slices.Contains(t.valueFlags, name) || slices.Contains(t.addressFlags, name)) {
			i++ // its value
		}
	}
	return flags
}

// addressGiven reports whether the user named the socket: in the tool's
// global flags or in its environment.
func (t runtimeTool) addressGiven(args, environ []string) bool {
	for _, name := range t.addressEnv {
		if v, ok := lookupEnv(environ, name); ok && v != "" {
			return true
		}
	}
	for _, a := range t.globalFlags(args) {
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if slices.Contains(t.addressFlags, name) {
			return true
		}
	}
	return false
}

// pickSocket returns the first of paths that is a socket something
// listens on. Only the first socket found counts: the managed socket of a
// stopped node is reported, not passed over for the host's runtime, whose
// containers are not the node's.
func pickSocket(paths []string) (string, error) {
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			// Not to be passed over for the next: a user who may not
			// look into the data dir would see another runtime's state.
			return "", fmt.Errorf("cannot look for a runtime socket at %s: %w (as root: sudo edgeplane ...)", p, err)
		}
		if err != nil || fi.Mode()&os.ModeSocket == 0 {
			continue
		}
		conn, err := net.DialTimeout("unix", p, 2*time.Second)
		if err != nil {
			return "", fmt.Errorf("no container runtime answers on %s (%v): start the node (edgeplane server or agent, which run the managed containerd) or the host's runtime (systemctl start containerd)", p, err)
		}
		_ = conn.Close()
		return p, nil
	}
	return "", fmt.Errorf("no container runtime socket at %s: start the node (edgeplane server or agent, which run the managed containerd) or the host's runtime (systemctl start containerd)", strings.Join(paths, ", "))
}

// toolBinary finds the tool: beside the edgeplane binary (a release folder,
// or where install.sh put both), else on the PATH. A candidate that is
// edgeplane itself (a link named after the tool) is passed over.
func toolBinary(name string) (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("%s: find edgeplane's own binary: %w", name, err)
	}
	if resolved, err := filepath.EvalSymlinks(self); err == nil {
		self = resolved
	}
	selfInfo, _ := os.Stat(self)
	notSelf := func(p string) bool {
		fi, err := os.Stat(p)
		return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 && (selfInfo == nil || !os.SameFile(fi, selfInfo))
	}
	beside := filepath.Join(filepath.Dir(self), name)
	if notSelf(beside) {
		return beside, nil
	}
	if p, err := exec.LookPath(name); err == nil && notSelf(p) {
		return p, nil
	}
	return "", fmt.Errorf("%s: no %s binary beside %s or on the PATH: install a release folder's %s with install.sh "+
		"(make dist builds it), or put %s on the PATH", name, name, self, name, name)
}

// lookupEnv is os.LookupEnv on environ (the last entry of a name wins, as
// for exec).
func lookupEnv(environ []string, name string) (string, bool) {
	v, found := "", false
	for _, kv := range environ {
		if k, val, ok := strings.Cut(kv, "="); ok && k == name {
			v, found = val, true
		}
	}
	return v, found
}
