package replay_test

import (
	"slices"
	"testing"

	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/replay"
)

// TestEveryActionIsCovered: every action of the recovery matrix
// (operation.Actions, the one list) has a replay step with a plan, a
// request rule, an apply and a console effect, and a fixture in
// testdata/recovery whose plan selects it (TestReplayEachFixture then
// replays it). An action added to the list without the rest fails here.
func TestEveryActionIsCovered(t *testing.T) {
	t.Parallel()
	selected := map[operation.Action]fixture{}
	for _, f := range fixtures(t) {
		a := replay.PlanFor(&f.Record, replay.Evidence{Audit: f.Audit}).Recommendation.Action
		if _, seen := selected[a]; !seen {
			selected[a] = f
		}
	}
	for _, a := range operation.Actions {
		for _, part := range replay.Missing(a) {
			t.Errorf("action %s has no %s", a, part)
		}
		f, ok := selected[a]
		if !ok {
			t.Errorf("action %s has no fixture: no record in testdata/recovery plans it", a)
			continue
		}
		if len(replay.Missing(a)) > 0 {
			continue
		}
		plan := replay.PlanFor(&f.Record, replay.Evidence{Audit: f.Audit})
		if len(plan.Checks) == 0 {
			t.Errorf("action %s: the plan for %s lists no checks", a, f.Name)
		}
		if len(replay.Explain(&f.Record, plan, "carol")) == 0 {
			t.Errorf("action %s: no console effect for %s", a, f.Name)
		}
	}
	for _, a := range replay.Stepped() {
		if !slices.Contains(operation.Actions, a) {
			t.Errorf("replay has a step for %s, which operation.Actions does not list", a)
		}
	}
}
