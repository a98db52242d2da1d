// Package testchart builds small Helm charts for tests: a chart archive
// (.tgz) made in the test, with no registry and no helm binary.
package testchart

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"sort"
	"testing"
)

// ConfigMapTemplate is a template of one ConfigMap named
// <release>-cm, with the value greeting and the chart's version.
const ConfigMapTemplate = `apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-cm
data:
  greeting: {{ .Values.greeting | quote }}
  chartVersion: {{ .Chart.Version | quote }}
`

// Archive is a chart .tgz named name at version: Chart.yaml, values.yaml
// (greeting: hello) and templates/configmap.yaml holding template.
func Archive(t testing.TB, name, version, template string) []byte {
	t.Helper()
	return Files(t, name, map[string]string{
		"Chart.yaml":               "apiVersion: v2\nname: " + name + "\nversion: " + version + "\n",
		"values.yaml":              "greeting: hello\n",
		"templates/configmap.yaml": template,
	})
}

// Base64 is Archive in base64, as a HelmChart's spec.chartContent.
func Base64(t testing.TB, name, version, template string) string {
	return base64.StdEncoding.EncodeToString(Archive(t, name, version, template))
}

// Files is a .tgz of files (path in the chart: content) under name/.
func Files(t testing.TB, name string, files map[string]string) []byte {
	t.Helper()
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, p := range paths {
		body := files[p]
		if err := tw.WriteHeader(&tar.Header{Name: name + "/" + p, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
