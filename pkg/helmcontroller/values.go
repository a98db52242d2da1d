package helmcontroller

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	"helm.sh/helm/v4/pkg/strvals"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// valuesFile is one source of values, in the order helm's --values files
// are given: later ones win.
type valuesFile struct {
	// from names the source in errors: "spec.valuesContent", "Secret
	// kube-system/x key y", ...
	from string
	data []byte
}

// mergeValues merges files as helm merges its --values files (maps merge
// key by key, anything else is replaced), then applies set as k3s's
// helm-controller does: integers, booleans and null as --set, everything
// else as --set-string.
func mergeValues(files []valuesFile, set map[string]intstr.IntOrString) (map[string]any, error) {
	out := map[string]any{}
	for _, f := range files {
		m := map[string]any{}
		if err := yaml.Unmarshal(f.data, &m); err != nil {
			return nil, fmt.Errorf("%s is not a YAML map of values: %w", f.from, err)
		}
		out = mergeMaps(out, m)
	}
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := set[k]
		var err error
		if typedValue(v) {
			err = strvals.ParseInto(k+"="+v.String(), out)
		} else {
			err = strvals.ParseIntoString(k+"="+escapeCommas(v.String()), out)
		}
		if err != nil {
			return nil, fmt.Errorf("spec.set[%q]: %w", k, err)
		}
	}
	return out, nil
}

// mergeMaps returns a with b merged over it; neither is changed.
func mergeMaps(a, b map[string]any) map[string]any {
	out := make(map[string]any, len(a)+len(b))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		if bm, ok := v.(map[string]any); ok {
			if am, ok := out[k].(map[string]any); ok {
				out[k] = mergeMaps(am, bm)
				continue
			}
		}
		out[k] = v
	}
	return out
}

// typedValue is whether a spec.set value goes through --set (typed) rather
// than --set-string: integers, and the strings true, false and null.
func typedValue(v intstr.IntOrString) bool {
	if v.Type == intstr.Int {
		return true
	}
	switch strings.ToLower(v.StrVal) {
	case "true", "false", "null":
		return true
	}
	return false
}

// commas matches a comma with the backslashes before it.
var commas = regexp.MustCompile(`\\*,`)

// escapeCommas escapes every comma of a --set-string value that is not
// escaped already, so that a value with commas stays one value.
func escapeCommas(s string) string {
	return commas.ReplaceAllStringFunc(s, func(m string) string {
		if len(m)%2 == 1 { // an even number of backslashes before the comma
			return `\` + m
		}
		return m
	})
}
