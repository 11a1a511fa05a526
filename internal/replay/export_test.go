package replay

import "github.com/genjobs/genjobs/internal/operation"

// Missing names the parts of action a's step that are not there (the
// step itself when there is none), for TestEveryActionIsCovered.
func Missing(a operation.Action) []string {
	s, ok := steps[a]
	if !ok {
		return []string{"step in replay's steps (internal/replay/actions.go)"}
	}
	var out []string
	for _, p := range []struct {
		name  string
		there bool
	}{{"plan", s.plan != nil}, {"request rule", s.request != nil}, {"apply", s.apply != nil}, {"explain (the console's effects)", s.explain != nil}} {
		if !p.there {
			out = append(out, p.name)
		}
	}
	return out
}

// Stepped lists the actions replay's steps has.
func Stepped() []operation.Action {
	out := make([]operation.Action, 0, len(steps))
	for a := range steps {
		out = append(out, a)
	}
	return out
}
