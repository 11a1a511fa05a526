package workload

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestRead(t *testing.T) {
	t.Parallel()
	good := `# comment
{"operation_id":"op-1","user_id":"u","model":"flux-pro-2","input":{"prompt":"x"},"budget_credits":20}

{"operation_id":"op-2","user_id":"u","model":"flux-pro-2","input":{},"budget_credits":1}
`
	items, err := Read(strings.NewReader(good))
	if err != nil || len(items) != 2 || items[1].OperationID != "op-2" {
		t.Fatalf("Read = %+v, %v", items, err)
	}
	tests := []struct{ name, body, want string }{
		{"unknown field", `{"operation_id":"op-1","user_id":"u","model":"m","input":{},"budget_credits":1,"budget":5}`, `line 1: not a workload object: unknown field "budget"`},
		{"bad id", `{"operation_id":"op 1","user_id":"u","model":"m","input":{},"budget_credits":1}`, "line 1: operation_id"},
		{"input not object", `{"operation_id":"op-1","user_id":"u","model":"m","input":"x","budget_credits":1}`, "input must be a JSON object"},
		{"no budget", `{"operation_id":"op-1","user_id":"u","model":"m","input":{}}`, "budget_credits must be positive"},
		{"duplicate", `{"operation_id":"a","user_id":"u","model":"m","input":{},"budget_credits":1}` + "\n" + `{"operation_id":"a","user_id":"u","model":"m","input":{},"budget_credits":1}`, `line 2: operation_id "a" already on line 1`},
		{"wrong type", `{"operation_id":"op-1","user_id":"u","model":"m","input":{},"budget_credits":"1"}`, "line 1: not a workload object"},
		{"trailing", `{"operation_id":"op-1","user_id":"u","model":"m","input":{},"budget_credits":1} {}`, "trailing data"},
		{"empty", "# nothing\n", "no operations"},
		{"too long", `{"operation_id":"op-1","user_id":"u","model":"m","input":{"p":"` + strings.Repeat("x", MaxLine) + `"},"budget_credits":1}`, "longer than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Read(strings.NewReader(tt.body))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err %v, want %q", err, tt.want)
			}
			var le *LineError
			if tt.name != "empty" && !errors.As(err, &le) {
				t.Fatalf("err %T is not a *LineError", err)
			}
		})
	}
}

func TestDemoCoversEveryScenario(t *testing.T) {
	t.Parallel()
	seen := map[Scenario]bool{}
	for _, it := range Demo() {
		if _, err := ParseLine(mustJSON(t, it)); err != nil {
			t.Fatalf("demo item %s is not a valid workload line: %v", it.OperationID, err)
		}
		seen[it.Scenario] = true
	}
	for _, s := range []Scenario{ScenarioSuccess, ScenarioRenderFailure, ScenarioSubmissionFailed, ScenarioLostResponse, ScenarioSlow, ScenarioReconcileFail} {
		if !seen[s] {
			t.Errorf("demo lacks %q", s)
		}
	}
}

func FuzzParseLine(f *testing.F) {
	f.Add([]byte(`{"operation_id":"op-1","user_id":"u","model":"m","input":{"prompt":"x"},"budget_credits":20}`))
	f.Add([]byte(`{"operation_id":"","input":[]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		it, err := ParseLine(b)
		if err != nil {
			return
		}
		if it.BudgetCredits <= 0 || it.Model == "" || len(it.Input) == 0 {
			t.Fatalf("accepted an invalid item %+v", it)
		}
	})
}

func mustJSON(t *testing.T, it Item) []byte {
	t.Helper()
	b, err := json.Marshal(it)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
