package catalog

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestArgumentShape(t *testing.T) {
	tools, err := Parse([]json.RawMessage{json.RawMessage(`{"tools":[{"name":"w","inputSchema":{"type":"object",` +
		`"required":["n","reason"],"properties":{"n":{"type":["integer","null"]},"reason":{"type":"string"},` +
		`"t":{"enum":["a", "b"],"default":"a"},"c":{"const":1},"z":{"type":"boolean"}}}}]}`)})
	if err != nil {
		t.Fatal(err)
	}
	all := ArgumentShape(tools[0], nil)
	want := Shape{Tool: "w", Required: []string{"n", "reason"}, Properties: []PropertyShape{
		{Name: "n", Type: "integer|null", Required: true},
		{Name: "reason", Type: "string", Required: true},
		{Name: "c", Enum: []string{"1"}},
		{Name: "t", Enum: []string{`"a"`, `"b"`}, Default: `"a"`},
		{Name: "z", Type: "boolean"},
	}}
	if d := cmp.Diff(want, all); d != "" {
		t.Errorf("all properties (-want +got):\n%s", d)
	}
	some := ArgumentShape(tools[0], []string{"t", "unknown"})
	if d := cmp.Diff(Shape{Tool: "w", Required: []string{"n", "reason"}, Properties: []PropertyShape{want.Properties[0], want.Properties[1], want.Properties[3]}}, some); d != "" {
		t.Errorf("required and t (-want +got):\n%s", d)
	}
}

func TestProblemAndChangedProperties(t *testing.T) {
	got := ProblemProperties([]string{"at '': missing properties 'b', 'a'", "at '/n': got string, want integer", "at '/n/x': too long", "at '': additional properties 'zz' not allowed"})
	if d := cmp.Diff([]string{"a", "b", "n"}, got); d != "" {
		t.Errorf("ProblemProperties (-want +got):\n%s", d)
	}
	ch := ChangedProperties([]Change{{Path: "/inputSchema/properties/target/enum"}, {Path: "/inputSchema/properties/a~1b"}, {Path: "/description"}, {Path: "/inputSchema/properties/target"}})
	if d := cmp.Diff([]string{"a/b", "target"}, ch); d != "" {
		t.Errorf("ChangedProperties (-want +got):\n%s", d)
	}
}
