package mutation

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const goodEntry = `# a comment
id:      one
file:    internal/x/x.go
find:    return a < b
replace: return a <= b
bug:     off by one
expect:  faultsim unit
note:    later
`

func TestParse(t *testing.T) {
	t.Parallel()
	ms, err := Parse(strings.NewReader(goodEntry+"\nid: two\nfile: y.go\nfind: x := 1\nreplace:\nbug: b\nexpect: integration\ncore: yes\n"), "list")
	if err != nil {
		t.Fatal(err)
	}
	want := []Mutant{
		{ID: "one", File: "internal/x/x.go", Find: "return a < b", Replace: "return a <= b", Bug: "off by one",
			Expect: []Layer{Unit, Faultsim}, Note: "later", Line: 2},
		{ID: "two", File: "y.go", Find: "x := 1", Replace: "", Bug: "b", Expect: []Layer{Integration}, Core: true, Line: 10},
	}
	if !reflect.DeepEqual(ms, want) {
		t.Errorf("got  %+v\nwant %+v", ms, want)
	}
	if got := ms[0].Package(); got != "./internal/x" {
		t.Errorf("package %q", got)
	}
	if got := ms[0].Tests(); got != "./internal/x/..." {
		t.Errorf("unit layer tests %q, want the package and those under it", got)
	}
}

func TestParseRefusesBadLists(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, list, want string
	}{
		{"empty", "# nothing\n", "no mutants"},
		{"missing field", strings.Replace(goodEntry, "bug:     off by one\n", "", 1), "missing bug"},
		{"missing replace", strings.Replace(goodEntry, "replace: return a <= b\n", "", 1), "missing replace"},
		{"unknown field", goodEntry + "colour: red\n", `unknown field "colour"`},
		{"field twice", goodEntry + "bug: again\n", `field "bug" given twice`},
		{"field before id", "file: x.go\n" + goodEntry, `"file" before the first "id:"`},
		{"not key value", goodEntry + "just words\n", "want \"key: value\""},
		{"duplicate id", goodEntry + strings.Replace(goodEntry, "# a comment\n", "", 1), `id "one" already used at line 2`},
		{"unknown layer", strings.Replace(goodEntry, "faultsim unit", "soak", 1), `unknown layer "soak"`},
		{"no change", strings.Replace(goodEntry, "return a <= b", "return a < b", 1), "nothing would change"},
		{"test file", strings.Replace(goodEntry, "x.go", "x_test.go", 1), "non-test .go file"},
		{"outside module", strings.Replace(goodEntry, "internal/x/x.go", "../x.go", 1), "inside the module"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse(strings.NewReader(tc.list), "list")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestApply(t *testing.T) {
	t.Parallel()
	src := "package x\n\nfunc less(a, b int) bool {\n\treturn a < b\n}\n\nfunc more(a, b int) bool {\n\treturn a > b\n}\n"
	for _, tc := range []struct {
		name, find, replace string
		want                string // mutated source, or "" when an error is wanted
		line, found         int
		lines               []int
	}{
		{name: "once", find: "return a < b", replace: "return a <= b", line: 4,
			want: strings.Replace(src, "a < b", "a <= b", 1)},
		{name: "fragment of a line", find: "a > b", replace: "b > a", line: 8,
			want: strings.Replace(src, "a > b", "b > a", 1)},
		{name: "missing", find: "return a == b", found: 0},
		{name: "twice", find: "(a, b int) bool {", found: 2, lines: []int{3, 7}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := Mutant{ID: tc.name, File: "x.go", Find: tc.find, Replace: tc.replace}
			got, line, err := m.Apply([]byte(src))
			if tc.want == "" {
				var ae *AnchorError
				if !errors.As(err, &ae) || ae.Found != tc.found || !reflect.DeepEqual(ae.Lines, tc.lines) {
					t.Fatalf("error %v, want an AnchorError found %d at %v", err, tc.found, tc.lines)
				}
				return
			}
			if err != nil || string(got) != tc.want || line != tc.line {
				t.Fatalf("got %q at line %d, %v; want %q at line %d", got, line, err, tc.want, tc.line)
			}
		})
	}
}

func TestApplyRefusesMultiLineEdits(t *testing.T) {
	t.Parallel()
	for _, m := range []Mutant{
		{ID: "empty", Find: "", Replace: "x"},
		{ID: "find", Find: "a\nb", Replace: "x"},
		{ID: "replace", Find: "a", Replace: "x\ny"},
	} {
		if _, _, err := m.Apply([]byte("a\nb\n")); err == nil {
			t.Errorf("%s: applied", m.ID)
		}
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	src := "package x\n\nfunc f(a, b int) bool { return a < b }\n"
	if err := os.WriteFile(filepath.Join(root, "x.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	good := Mutant{ID: "good", File: "x.go", Find: "a < b", Replace: "a <= b"}
	rotted := Mutant{ID: "rotted", File: "x.go", Find: "a > b", Replace: "a >= b"}
	syntax := Mutant{ID: "syntax", File: "x.go", Find: "a < b", Replace: "a < < b"}
	gone := Mutant{ID: "gone", File: "y.go", Find: "a", Replace: "b"}
	if err := checkAll(root, []Mutant{good}); err != nil {
		t.Fatalf("good mutant: %v", err)
	}
	err := checkAll(root, []Mutant{good, rotted, syntax, gone})
	for _, want := range []string{"mutant rotted: anchor not found in x.go", "mutant syntax: the mutated file does not parse", "mutant gone:"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want it to contain %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "mutant good") {
		t.Errorf("the good mutant is reported: %v", err)
	}
	// Check reads, never writes: the file is as it was.
	if got, _ := os.ReadFile(filepath.Join(root, "x.go")); string(got) != src {
		t.Errorf("Check changed the file: %q", got)
	}
}

// TestListApplies holds the repository's own list to its anchors, so a
// change that moves a mutated line fails here, in the ordinary unit tests,
// and not only when someone runs make mutants.
func TestListApplies(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..", "..")
	ms, err := Load(filepath.Join(root, "testdata", "mutants", "mutants.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if err := checkAll(root, ms); err != nil {
		t.Fatalf("the mutant list has rotted; update find/replace (make mutants MUTANTS_ARGS=--check):\n%v", err)
	}
}

func TestParseLayers(t *testing.T) {
	t.Parallel()
	got, err := ParseLayers("integration, unit,unit")
	if err != nil || !reflect.DeepEqual(got, []Layer{Unit, Integration}) {
		t.Errorf("got %v, %v", got, err)
	}
	for _, bad := range []string{"", " , ", "unit,bench"} {
		if _, err := ParseLayers(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// checkAll verifies that every mutant applies to the module at root: its
// anchor occurs exactly once and the result parses. It runs no test.
func checkAll(root string, ms []Mutant) error {
	var errs []error
	for _, m := range ms {
		if _, err := m.Mutate(root); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
