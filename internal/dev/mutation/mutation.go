// Package mutation is genjobs' standing mutation check of the safety core
// (make mutants): a list of one-line bugs a real change could make, kept
// in the repository (testdata/mutants/mutants.txt), and what it takes to
// apply one of them to a copy of the module and see which test layers
// notice. A mutant names its line by an anchor, a fragment that must occur
// exactly once in its file, so an edit that moves or rewrites the line
// makes the list fail loudly instead of silently mutating nothing.
package mutation

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// Layer is one kind of test run against a mutant.
type Layer string

// The layers, in the order they run.
const (
	// Unit runs the tests of the mutated file's package.
	Unit Layer = "unit"
	// Faultsim runs the fault-injection simulation's tests.
	Faultsim Layer = "faultsim"
	// Integration runs the store's integration tests on DynamoDB Local.
	Integration Layer = "integration"
)

// Layers lists every layer in running order.
var Layers = []Layer{Unit, Faultsim, Integration}

// ParseLayers reads a comma- or space-separated list of layer names.
func ParseLayers(s string) ([]Layer, error) {
	named := strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' })
	for _, f := range named {
		if !slices.Contains(Layers, Layer(f)) {
			return nil, fmt.Errorf("unknown layer %q (want some of %v)", f, Layers)
		}
	}
	// Running order, whatever order they were named in, each once.
	out := slices.DeleteFunc(slices.Clone(Layers), func(l Layer) bool { return !slices.Contains(named, string(l)) })
	if len(out) == 0 {
		return nil, errors.New("no layer named")
	}
	return out, nil
}

// Mutant is one one-line bug.
type Mutant struct {
	// ID names it in the table.
	ID string
	// File is the mutated file, relative to the module root, with slashes.
	File string
	// Find is the anchor: a fragment of one line that occurs exactly once
	// in File. Replace is what it becomes.
	Find, Replace string
	// Bug says what a real change could break this way.
	Bug string
	// Expect lists the layers that should kill it.
	Expect []Layer
	// Note is optional: what to re-anchor once a pending fix lands.
	Note string
	// Core marks the fixed core set ("core: yes") the simulation's bar
	// (-min-sim) is measured on, so the list can grow without diluting it.
	Core bool
	// Line is where its block starts in the list, for error messages.
	Line int
}

// Package is the mutated file's package, as a go command pattern.
func (m Mutant) Package() string { return "./" + filepath.ToSlash(filepath.Dir(m.File)) }

// Tests is what the unit layer tests for m: the mutated package and the
// packages under it (package store's rules are proven by its backends'
// conformance tests, in store/bolt and store/dynamo).
func (m Mutant) Tests() string {
	return "./" + path.Join(filepath.ToSlash(filepath.Dir(m.File)), "...")
}

// Expects reports whether the list expects l to kill the mutant.
func (m Mutant) Expects(l Layer) bool { return slices.Contains(m.Expect, l) }

// fields of a list entry; the required ones must all be present.
var (
	requiredFields = []string{"id", "file", "find", "replace", "bug", "expect"}
	optionalFields = []string{"note", "core"}
)

// Parse reads a mutant list. The format is one block per mutant, each a
// few "key: value" lines (the value runs to the end of the line, with the
// blanks around it trimmed); a block starts with its "id:" line, and
// lines starting with # are comments. Every problem is reported, each
// with its line.
func Parse(r io.Reader, name string) ([]Mutant, error) {
	var (
		out  []Mutant
		errs []error
		cur  map[string]string
		at   int
		ids  = map[string]int{}
	)
	flush := func() {
		if cur == nil {
			return
		}
		m, err := build(cur, at)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s:%d: %w", name, at, err))
		} else if first, dup := ids[m.ID]; dup {
			errs = append(errs, fmt.Errorf("%s:%d: id %q already used at line %d", name, at, m.ID, first))
		} else {
			ids[m.ID] = at
			out = append(out, m)
		}
		cur = nil
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimRight(sc.Text(), " \t\r")
		if strings.TrimSpace(line) == "" || strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		key, value, ok := strings.Cut(line, ":")
		key = strings.TrimSpace(key)
		if !ok || strings.ContainsAny(key, " \t") {
			errs = append(errs, fmt.Errorf("%s:%d: want \"key: value\", got %q", name, n, line))
			continue
		}
		value = strings.TrimSpace(value)
		if key == "id" {
			flush()
			cur, at = map[string]string{}, n
		}
		switch {
		case cur == nil:
			errs = append(errs, fmt.Errorf("%s:%d: %q before the first \"id:\"", name, n, key))
		case !slices.Contains(requiredFields, key) && !slices.Contains(optionalFields, key):
			errs = append(errs, fmt.Errorf("%s:%d: unknown field %q (want %v, optionally %v)", name, n, key, requiredFields, optionalFields))
		default:
			if _, dup := cur[key]; dup {
				errs = append(errs, fmt.Errorf("%s:%d: field %q given twice", name, n, key))
			}
			cur[key] = value
		}
	}
	if err := sc.Err(); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", name, err))
	}
	flush()
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no mutants", name)
	}
	return out, nil
}

func build(f map[string]string, line int) (Mutant, error) {
	var missing []string
	for _, k := range requiredFields {
		// replace may be empty (the fragment is deleted), but must be there.
		if v, ok := f[k]; !ok || (v == "" && k != "replace") {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		return Mutant{}, fmt.Errorf("mutant %q: missing %s", f["id"], strings.Join(missing, ", "))
	}
	m := Mutant{ID: f["id"], File: f["file"], Find: f["find"], Replace: f["replace"], Bug: f["bug"], Note: f["note"], Line: line}
	if strings.ContainsAny(m.ID, " \t,") {
		return Mutant{}, fmt.Errorf("mutant %q: an id has no blanks or commas", m.ID)
	}
	if filepath.IsAbs(m.File) || strings.HasPrefix(filepath.Clean(m.File), "..") || !strings.HasSuffix(m.File, ".go") || strings.HasSuffix(m.File, "_test.go") {
		return Mutant{}, fmt.Errorf("mutant %s: file %q must be a non-test .go file inside the module", m.ID, m.File)
	}
	if m.Find == m.Replace {
		return Mutant{}, fmt.Errorf("mutant %s: replace equals find: nothing would change", m.ID)
	}
	expect, err := ParseLayers(f["expect"])
	if err != nil {
		return Mutant{}, fmt.Errorf("mutant %s: expect: %w", m.ID, err)
	}
	if c := f["core"]; c != "" && c != "no" && c != "yes" {
		return Mutant{}, fmt.Errorf("mutant %s: core is yes or no, not %q", m.ID, c)
	}
	m.Expect, m.Core = expect, f["core"] == "yes"
	return m, nil
}

// Load reads the list at path.
func Load(path string) ([]Mutant, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Parse(f, path)
}

// AnchorError says that a mutant's anchor does not pick exactly one place
// in its file: the list has rotted (the line was edited or moved) or the
// anchor is too short. Lines are where it was found.
type AnchorError struct {
	ID, File string
	Found    int
	Lines    []int
}

func (e *AnchorError) Error() string {
	if e.Found == 0 {
		return fmt.Sprintf("mutant %s: anchor not found in %s (the line changed: update find/replace in the list)", e.ID, e.File)
	}
	return fmt.Sprintf("mutant %s: anchor found %d times in %s (lines %v): make it longer so it picks one line", e.ID, e.Found, e.File, e.Lines)
}

// Apply returns src with the mutant's anchor replaced and the line it is
// on, or an *AnchorError unless the anchor occurs exactly once.
func (m Mutant) Apply(src []byte) ([]byte, int, error) {
	find := []byte(m.Find)
	if m.Find == "" || bytes.ContainsAny(find, "\r\n") || strings.ContainsAny(m.Replace, "\r\n") {
		return nil, 0, fmt.Errorf("mutant %s: find and replace are one line each, and find is not empty", m.ID)
	}
	var lines []int
	for off := 0; ; {
		i := bytes.Index(src[off:], find)
		if i < 0 {
			break
		}
		lines = append(lines, 1+bytes.Count(src[:off+i], []byte("\n")))
		off += i + len(find)
	}
	if len(lines) != 1 {
		return nil, 0, &AnchorError{ID: m.ID, File: m.File, Found: len(lines), Lines: lines}
	}
	return bytes.Replace(src, find, []byte(m.Replace), 1), lines[0], nil
}

// Applied is a mutant applied to its file's content.
type Applied struct {
	Orig, Mutated []byte
	// Line is the mutated line.
	Line int
}

// Mutate reads the mutant's file under root and applies the mutant; the
// result must still parse (a syntax error is a broken entry, not a mutant).
func (m Mutant) Mutate(root string) (Applied, error) {
	orig, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(m.File)))
	if err != nil {
		return Applied{}, fmt.Errorf("mutant %s: %w", m.ID, err)
	}
	mutated, line, err := m.Apply(orig)
	if err != nil {
		return Applied{}, err
	}
	if _, err := parser.ParseFile(token.NewFileSet(), m.File, mutated, parser.SkipObjectResolution); err != nil {
		return Applied{}, fmt.Errorf("mutant %s: the mutated file does not parse: %w", m.ID, err)
	}
	return Applied{Orig: orig, Mutated: mutated, Line: line}, nil
}
