package main

import (
	"strings"
	"testing"
)

func TestCauses(t *testing.T) {
	tests := []struct {
		name string
		dump string
		want []string // first symbol of each cause
	}{
		{
			name: "a call chain to text/template",
			dump: `_ -> main.main
main.main -> pkg.Render
pkg.Render -> text/template.(*state).evalField <ReflectMethod>
`,
			want: []string{"text/template.(*state).evalField"},
		},
		{
			name: "reached through a method table only",
			dump: `_ -> main.main
main.main -> type:reflect.Value <UsedInIface>
type:reflect.Value <UsedInIface> -> reflect.(*Value).Method <ReflectMethod>
`,
		},
		{
			name: "first path wins",
			dump: `_ -> main.main
main.main -> a.F
a.F -> b.G <ReflectMethod>
main.main -> b.G <ReflectMethod>
`,
			want: []string{"b.G"},
		},
		{name: "nothing flagged", dump: "_ -> main.main\nmain.main -> fmt.Println\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, err := read(strings.NewReader(tt.dump))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, c := range g.causes() {
				got = append(got, c[0])
			}
			if strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("causes = %v, want %v", got, tt.want)
			}
		})
	}
	g, _ := read(strings.NewReader("_ -> main.main\nmain.main -> a.F\na.F -> b.G <ReflectMethod>\n"))
	if c := g.chain("b.G"); strings.Join(c, " ") != "b.G a.F main.main" {
		t.Errorf("chain = %v", c)
	}
}
