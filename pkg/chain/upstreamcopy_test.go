package chain

import (
	"testing"

	"github.com/edgeplane/edgeplane/internal/testing/upstreamcopy"
)

// upstreamCopies are the functions upstreamcopy.go copies, and every way a
// copy may differ from its original (upstreamcopy.Check).
var upstreamCopies = []upstreamcopy.Copy{
	{
		UpstreamFile: "cmd/kube-apiserver/app/config.go", UpstreamFunc: "NewConfig",
		CopyFunc: "upstreamNewConfig",
		Replacements: [][2]string{
			{"c := &Config{", "c := &app.Config{"},
			{"controlplaneapiserver.BuildGenericConfig(", "upstreamBuildGenericConfig("},
			{"\topts.InformerName,\n", "\topts.InformerName,\n\t\tresync,\n"},
			{"\tkubeAPIs, serviceResolver, pluginInitializer, err := CreateKubeAPIServerConfig(", "\tadjust(genericConfig)\n\tversionedInformers = newContextInformers(versionedInformers)\n\n\tkubeAPIs, serviceResolver, pluginInitializer, err := app.CreateKubeAPIServerConfig("},
		},
	},
	{
		UpstreamFile: "pkg/controlplane/apiserver/config.go", UpstreamFunc: "BuildGenericConfig",
		CopyFunc: "upstreamBuildGenericConfig",
		Replacements: [][2]string{
			{"\t\t10*time.Minute,\n", "\t\tresync,\n"},
			{"= BuildAuthorizer(", "= controlplaneapiserver.BuildAuthorizer("},
			{"s.SecureServing.ApplyToConfig(genericConfig)", "applyLoopbackServing(s.SecureServing, genericConfig)"},
		},
	},
}

// TestUpstreamCopies fails when upstream changes a function upstreamcopy.go
// copies.
func TestUpstreamCopies(t *testing.T) {
	upstreamcopy.Check(t, "k8s.io/kubernetes", "upstreamcopy.go", upstreamCopies)
}
