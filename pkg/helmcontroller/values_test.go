package helmcontroller

import (
	"encoding/json"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestMergeValues(t *testing.T) {
	tests := []struct {
		name    string
		files   []string
		set     map[string]intstr.IntOrString
		want    string
		wantErr string
	}{
		{name: "none", want: `{}`},
		{name: "later file wins, maps merge", files: []string{"a: 1\nm: {p: 1, q: 1}\n", "a: 2\nm: {q: 2}\n"}, want: `{"a":2,"m":{"p":1,"q":2}}`},
		{name: "a map replaces a scalar", files: []string{"m: 1\n", "m: {x: 1}\n"}, want: `{"m":{"x":1}}`},
		{name: "a list replaces a list", files: []string{"l: [1, 2]\n", "l: [3]\n"}, want: `{"l":[3]}`},
		{name: "set over files", files: []string{"a: {b: file}\n"}, set: map[string]intstr.IntOrString{"a.b": intstr.FromString("set")}, want: `{"a":{"b":"set"}}`},
		{name: "set typed: int, bool, null", set: map[string]intstr.IntOrString{"i": intstr.FromInt32(3), "b": intstr.FromString("true"), "n": intstr.FromString("null")}, want: `{"b":true,"i":3,"n":null}`},
		{name: "set string stays a string", set: map[string]intstr.IntOrString{"s": intstr.FromString("0123")}, want: `{"s":"0123"}`},
		{name: "set string with commas is one value", set: map[string]intstr.IntOrString{"s": intstr.FromString("a,b,c")}, want: `{"s":"a,b,c"}`},
		{name: "not a map", files: []string{"- a\n"}, wantErr: "spec.valuesContent is not a YAML map of values"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var files []valuesFile
			for _, f := range tt.files {
				files = append(files, valuesFile{from: "spec.valuesContent", data: []byte(f)})
			}
			got, err := mergeValues(files, tt.set)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			b, _ := json.Marshal(got)
			if string(b) != tt.want {
				t.Errorf("got %s, want %s", b, tt.want)
			}
		})
	}
}

func TestEscapeCommas(t *testing.T) {
	for in, want := range map[string]string{
		"a,b":   `a\,b`,
		`a\,b`:  `a\,b`,
		`a\\,b`: `a\\\,b`,
		"abc":   "abc",
		",,":    `\,\,`,
	} {
		if got := escapeCommas(in); got != want {
			t.Errorf("escapeCommas(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestPlanHash(t *testing.T) {
	a := &plan{Release: "r", Namespace: "n", Values: map[string]any{"a": 1, "b": map[string]any{"c": 2}}}
	b := &plan{Release: "r", Namespace: "n", Values: map[string]any{"b": map[string]any{"c": 2}, "a": 1}}
	c := &plan{Release: "r", Namespace: "n", Values: map[string]any{"a": 2}}
	if a.hash() != b.hash() {
		t.Error("the same values in another order hash differently")
	}
	if a.hash() == c.hash() {
		t.Error("other values hash the same")
	}
	if len(a.hash()) != 63 {
		t.Errorf("hash %q is not 63 characters (a label value's most)", a.hash())
	}
}
