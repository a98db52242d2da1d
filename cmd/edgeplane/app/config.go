package app

import (
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/edgeplane/edgeplane/pkg/config"
)

const configFlag = "config"

// addConfigFlag adds --config to a command whose other flags a config file sets.
func addConfigFlag(fs *pflag.FlagSet) { addConfigFlagFor(fs, config.DefaultPath) }

// addConfigFlagFor is addConfigFlag with another default file.
func addConfigFlagFor(fs *pflag.FlagSet, defaultPath string) {
	fs.String(configFlag, defaultPath, "Config file: YAML whose keys are the long flag names, lists for repeatable flags; "+
		"read when it exists, then drop-ins in <file>"+config.DropInSuffix+"/*.yaml in name order. Flags on the command line win. Empty: no config file.")
}

// loadConfig sets the command's flags from the config file and its drop-ins,
// except those given on the command line, and returns the files it read. An
// explicit --config must exist.
func loadConfig(cmd *cobra.Command) ([]string, error) {
	fs := cmd.Flags()
	path, err := fs.GetString(configFlag)
	if err != nil || path == "" {
		return nil, err
	}
	files, err := config.Files(path, fs.Changed(configFlag))
	if err != nil {
		return nil, err
	}
	if err := config.Load(fs, files); err != nil {
		return nil, err
	}
	return files, nil
}
