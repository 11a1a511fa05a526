package intake_test

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/genjobs/genjobs/client"
	"github.com/genjobs/genjobs/internal/intake"
	"github.com/genjobs/genjobs/internal/operation"
)

// TestMain holds what the tests saw to the document once they ran: every
// status a route answered is listed for it, every error code seen is in
// the Error schema's enum, and, on a whole run, every documented status
// and code was seen (a listed answer no test produces is not known true).
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		whole := flag.Lookup("test.run").Value.String() == "" && flag.Lookup("test.skip").Value.String() == ""
		if err := checkObserved(whole); err != nil {
			fmt.Fprintln(os.Stderr, "openapi.yaml and the handler's answers disagree:\n"+err.Error())
			code = 1
		}
	}
	os.Exit(code)
}

type doc map[string]any

func loadDoc(t testing.TB) doc {
	d, err := parseDoc()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// parseDoc decodes into a plain map: yaml.v3 would decode nested
// mappings into a named map type too.
func parseDoc() (doc, error) {
	var d map[string]any
	err := yaml.Unmarshal(intake.OpenAPI, &d)
	return d, err
}

func (d doc) m(v any) map[string]any { x, _ := v.(map[string]any); return x }

// resolve follows a local $ref.
func (d doc) resolve(v any) map[string]any {
	node := d.m(v)
	for node["$ref"] != nil {
		ref, _ := node["$ref"].(string)
		var cur any = map[string]any(d)
		for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
			cur = d.m(cur)[part]
		}
		node = d.m(cur)
	}
	return node
}

// operations maps "METHOD /path" to the document's operation.
func (d doc) operations() map[string]map[string]any {
	out := map[string]map[string]any{}
	for p, item := range d.m(d["paths"]) {
		for method, op := range d.m(item) {
			if method != "parameters" {
				out[strings.ToUpper(method)+" "+p] = d.m(op)
			}
		}
	}
	return out
}

func TestDocumentedRoutesAreServed(t *testing.T) {
	t.Parallel()
	d := loadDoc(t)
	if d["openapi"] != "3.1.0" {
		t.Fatalf("openapi %v, want 3.1.0", d["openapi"])
	}
	var documented []string
	for r := range d.operations() {
		documented = append(documented, r)
	}
	slices.Sort(documented)
	served := slices.Sorted(slices.Values(intake.Routes()))
	if !slices.Equal(documented, served) {
		t.Fatalf("documented routes %v, served %v", documented, served)
	}
	// Every answer with a status documents its ETag; every change and
	// cancel its If-Match.
	for r, op := range d.operations() {
		for code, resp := range d.m(op["responses"]) {
			res := d.resolve(resp)
			schema := d.resolve(d.m(d.m(res["content"])["application/json"])["schema"])
			if reflect.DeepEqual(schema, d.resolve(map[string]any{"$ref": "#/components/schemas/Status"})) && d.m(res["headers"])["ETag"] == nil {
				t.Errorf("%s %s: a status without its ETag header", r, code)
			}
		}
		if strings.HasPrefix(r, "PUT") || strings.HasSuffix(r, "/cancel") {
			var names []string
			for _, p := range op["parameters"].([]any) {
				names = append(names, d.resolve(p)["name"].(string))
			}
			if !slices.Contains(names, "If-Match") {
				t.Errorf("%s does not document If-Match", r)
			}
		}
	}
}

// TestDocumentedSchemasAreTheStructs: the request schema and the status
// schema (nested ones too) have exactly the Go structs' JSON fields, and
// require exactly those without omitempty.
func TestDocumentedSchemasAreTheStructs(t *testing.T) {
	t.Parallel()
	d := loadDoc(t)
	schemas := d.m(d.m(d["components"])["schemas"])
	for name, ty := range map[string]reflect.Type{
		"CreateRequest": reflect.TypeFor[intake.CreateRequest](),
		"Status":        reflect.TypeFor[intake.Status](),
		"Error":         reflect.TypeFor[intake.Error](),
	} {
		if err := d.sameFields(schemas[name], ty, name); err != nil {
			t.Error(err)
		}
	}
	for _, r := range []string{"POST /v1/operations", "PUT /v1/operations/{id}"} {
		body := d.m(d.m(d.m(d.operations()[r]["requestBody"])["content"])["application/json"])["schema"]
		if err := d.sameFields(body, reflect.TypeFor[intake.CreateRequest](), r+" body"); err != nil {
			t.Error(err)
		}
	}
}

func (d doc) sameFields(v any, ty reflect.Type, path string) error {
	for ty.Kind() == reflect.Pointer {
		ty = ty.Elem()
	}
	s := d.resolve(v)
	if ty.Kind() == reflect.Slice && ty.Elem().Kind() != reflect.Uint8 {
		return d.sameFields(s["items"], ty.Elem(), path+"[]")
	}
	if ty.Kind() != reflect.Struct || ty == reflect.TypeFor[time.Time]() {
		return nil
	}
	var fields, required []string
	var errs []error
	props := d.m(s["properties"])
	for f := range ty.Fields() {
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		fields = append(fields, name)
		if !strings.Contains(opts, "omit") {
			required = append(required, name)
		}
		if err := d.sameFields(props[name], f.Type, path+"."+name); err != nil {
			errs = append(errs, err)
		}
	}
	var documented, docRequired []string
	for p := range props {
		documented = append(documented, p)
	}
	for _, r := range asList(s["required"]) {
		docRequired = append(docRequired, r.(string))
	}
	slices.Sort(fields)
	slices.Sort(required)
	slices.Sort(documented)
	slices.Sort(docRequired)
	if !slices.Equal(fields, documented) {
		errs = append(errs, fmt.Errorf("%s: documented properties %v, Go fields %v", path, documented, fields))
	}
	if !slices.Equal(required, docRequired) {
		errs = append(errs, fmt.Errorf("%s: documented required %v, Go's always-present fields %v", path, docRequired, required))
	}
	return errors.Join(errs...)
}

func asList(v any) []any { l, _ := v.([]any); return l }

func checkObserved(whole bool) error {
	d, err := parseDoc()
	if err != nil {
		return err
	}
	var errs []error
	ops := d.operations()
	observed.Lock()
	defer observed.Unlock()
	for route, statuses := range observed.statuses {
		op, ok := ops[route]
		if !ok {
			continue // the mux's own 404 and 405 answers, and unclean paths
		}
		for status := range statuses {
			if d.m(op["responses"])[strconv.Itoa(status)] == nil {
				errs = append(errs, fmt.Errorf("%s answered %d, which is not documented", route, status))
			}
		}
	}
	var enum []string
	for _, c := range asList(d.resolve(d.m(d.m(d.m(d["components"])["schemas"])["Error"])["properties"].(map[string]any)["code"])["enum"]) {
		enum = append(enum, c.(string))
	}
	for c := range observed.codes {
		if !slices.Contains(enum, c) {
			errs = append(errs, fmt.Errorf("error code %s is not in the Error schema's enum", c))
		}
	}
	if whole {
		for route, op := range ops {
			for status := range d.m(op["responses"]) {
				n, _ := strconv.Atoi(status)
				if !observed.statuses[route][n] {
					errs = append(errs, fmt.Errorf("%s documents %s, which no test produced", route, status))
				}
			}
		}
		for _, c := range enum {
			if !observed.codes[c] {
				errs = append(errs, fmt.Errorf("error code %s is documented, and no test produced it", c))
			}
		}
	}
	return errors.Join(errs...)
}

// TestWireEnumsAreTheEngines: the client's phase, remote state,
// settlement and refund state constants are the engine's values, and the
// document's enums list exactly them.
func TestWireEnumsAreTheEngines(t *testing.T) {
	t.Parallel()
	d := loadDoc(t)
	schemas := d.m(d.m(d["components"])["schemas"])
	enum := func(schema, prop string) []string {
		var out []string
		for _, v := range asList(d.m(d.m(d.m(schemas[schema])["properties"])[prop])["enum"]) {
			out = append(out, v.(string))
		}
		return out
	}
	strs := func(vs ...any) []string {
		out := make([]string, len(vs))
		for i, v := range vs {
			out[i] = reflect.ValueOf(v).String()
		}
		return out
	}
	var engine []any
	for _, p := range operation.Phases {
		engine = append(engine, p)
	}
	for _, c := range []struct {
		name                string
		doc, client, engine []string
	}{
		{"phase", enum("Status", "phase"), strs(client.PhasePrepared, client.PhaseSubmitting, client.PhaseUncertain, client.PhaseAccepted,
			client.PhaseSucceeded, client.PhaseDelivered, client.PhaseFailed, client.PhaseRejected, client.PhaseStalled, client.PhaseSuperseded), strs(engine...)},
		{"remote state", enum("Remote", "state"), strs(client.RemoteQueued, client.RemoteRunning, client.RemoteSucceeded, client.RemoteFailed, client.RemoteCanceled),
			strs(operation.RemoteQueued, operation.RemoteRunning, operation.RemoteSucceeded, operation.RemoteFailed, operation.RemoteCanceled)},
		{"settlement", enum("Status", "settlement"), strs(client.SettlementUnresolved, client.SettlementSettled),
			strs(operation.SettlementUnresolved, operation.SettlementSettled)},
		{"refund state", enum("Credits", "refund_state"), strs(client.RefundNone, client.RefundPending, client.RefundSettled),
			strs(operation.RefundNone, operation.RefundPending, operation.RefundSettled)},
	} {
		if !slices.Equal(c.doc, c.client) || !slices.Equal(c.client, c.engine) {
			t.Errorf("%s: documented %v, client %v, engine %v", c.name, c.doc, c.client, c.engine)
		}
	}
}
