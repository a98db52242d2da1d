// Package kubectli18n keeps kubectl's message catalogs out of every process
// that is not kubectl. kubectl's commands translate their help texts in
// package variables, so the first i18n.T call happens during init: upstream
// (k8s.io/kubectl v0.37.2, pkg/util/i18n) then unzips and parses its catalog,
// 30-35 ms of every `edgeplane server` start before main and ~4 MB
// allocated, for help texts a server never prints. Imported before anything
// that imports kubectl (cmd/edgeplane/main.go), it sets the loader upstream
// provides for this (i18n.SetLoadTranslationsFunc): the catalog is loaded as
// upstream loads it when the process runs kubectl (`edgeplane kubectl`, or
// the binary linked as kubectl), and not at all otherwise, where T returns
// its English text.
package kubectli18n

import (
	"os"
	"path/filepath"

	"k8s.io/kubectl/pkg/util/i18n"
)

func init() {
	if err := i18n.SetLoadTranslationsFunc(load); err != nil {
		panic(err) // only if translations were loaded before this init: an import-order bug
	}
}

func load() error {
	if !RunsKubectl(os.Args) {
		return nil
	}
	return i18n.LoadTranslations("kubectl", nil)
}

// RunsKubectl reports whether a command line runs kubectl: the binary
// invoked as kubectl, or its kubectl subcommand.
func RunsKubectl(args []string) bool {
	if len(args) == 0 {
		return false
	}
	return filepath.Base(args[0]) == "kubectl" || (len(args) > 1 && args[1] == "kubectl")
}
