// Package workload reads the operations `genjobs local` runs: JSON Lines,
// one operation a line, decoded strictly so a typo is an error that names
// its line, never a silently different workload.
package workload

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/genjobs/genjobs/internal/message"
)

// Item is one operation to run.
type Item struct {
	OperationID   string          `json:"operation_id"`
	UserID        string          `json:"user_id"`
	Model         string          `json:"model"`
	Input         json.RawMessage `json:"input"`
	BudgetCredits int64           `json:"budget_credits"`
	// Scenario is set only by the built-in demo: what the simulator does
	// to this operation (see the Scenario constants).
	Scenario Scenario `json:"-"`
}

// Scenario is a demo operation's scripted fate.
type Scenario string

// The demo's scenarios.
const (
	ScenarioSuccess          Scenario = "success"
	ScenarioRenderFailure    Scenario = "render failure, refunded"
	ScenarioSubmissionFailed Scenario = "502 with job id"
	ScenarioLostResponse     Scenario = "lost response"
	ScenarioSlow             Scenario = "slow render"
	ScenarioReconcileFail    Scenario = "reconcile-jobs --fail"
)

// MaxLine bounds one line; an input bigger than this is not a render
// request but a mistake.
const MaxLine = 64 << 10

// LineError names the line and the problem.
type LineError struct {
	Line    int
	Problem string
}

func (e *LineError) Error() string { return fmt.Sprintf("workload line %d: %s", e.Line, e.Problem) }

// Read parses a workload. Blank lines and lines starting with # are
// skipped. Every problem found is reported, up to 20.
func Read(r io.Reader) ([]Item, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), MaxLine+1)
	var items []Item
	var errs []error
	seen := map[string]int{}
	line := 0
	for sc.Scan() {
		line++
		text := bytes.TrimSpace(sc.Bytes())
		if len(text) == 0 || text[0] == '#' {
			continue
		}
		it, err := ParseLine(text)
		if err != nil {
			errs = append(errs, &LineError{Line: line, Problem: err.Error()})
		} else if first, dup := seen[it.OperationID]; dup {
			errs = append(errs, &LineError{Line: line, Problem: fmt.Sprintf("operation_id %q already on line %d", it.OperationID, first)})
		} else {
			seen[it.OperationID] = line
			items = append(items, it)
		}
		if len(errs) >= 20 {
			break
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			errs = append(errs, &LineError{Line: line + 1, Problem: fmt.Sprintf("longer than %d bytes", MaxLine)})
		} else {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if len(items) == 0 {
		return nil, errors.New("workload has no operations")
	}
	return items, nil
}

// ParseLine decodes and checks one line.
func ParseLine(b []byte) (Item, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var it Item
	if err := dec.Decode(&it); err != nil {
		return Item{}, fmt.Errorf("not a workload object: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	if _, err := dec.Token(); err != io.EOF {
		return Item{}, errors.New("trailing data after the object")
	}
	switch {
	case !message.ValidOperationID(it.OperationID):
		return Item{}, fmt.Errorf("operation_id %.40q: want letters, digits and . _ : - (at most 128)", it.OperationID)
	case strings.TrimSpace(it.UserID) == "" || len(it.UserID) > 128:
		return Item{}, errors.New("user_id is required (at most 128 characters)")
	case strings.TrimSpace(it.Model) == "" || len(it.Model) > 128:
		return Item{}, errors.New("model is required (at most 128 characters)")
	case len(bytes.TrimSpace(it.Input)) == 0 || bytes.TrimSpace(it.Input)[0] != '{':
		return Item{}, errors.New("input must be a JSON object")
	case it.BudgetCredits <= 0:
		return Item{}, errors.New("budget_credits must be positive")
	}
	return it, nil
}

// Demo is the built-in workload: one operation per scenario the local
// stack demonstrates, plus a few ordinary successes.
func Demo() []Item {
	mk := func(id, model, prompt string, s Scenario) Item {
		in, _ := json.Marshal(map[string]string{"prompt": prompt, "size": "1024x1024"})
		return Item{OperationID: id, UserID: "demo-user", Model: model, Input: in, BudgetCredits: 50, Scenario: s}
	}
	return []Item{
		mk("demo-success-1", "flux-pro-2", "a lighthouse at dusk", ScenarioSuccess),
		mk("demo-success-2", "flux-pro-2", "a fox in the snow", ScenarioSuccess),
		mk("demo-success-3", "flux-pro-2", "a tram in the rain", ScenarioSuccess),
		mk("demo-render-failure", "demo-fail", "an impossible staircase", ScenarioRenderFailure),
		mk("demo-502-with-job-id", "flux-pro-2", "a glass harbour", ScenarioSubmissionFailed),
		mk("demo-lost-response", "flux-pro-2", "a paper moon", ScenarioLostResponse),
		mk("demo-slow-render", "demo-slow", "a city from above, two takes", ScenarioSlow),
		mk("demo-reconcile-fail", "flux-pro-2", "a clock without hands", ScenarioReconcileFail),
	}
}
