package mutation

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Summary counts a run's results.
type Summary struct {
	// Total is the number of mutants run; Killed those some layer killed.
	Total, Killed int
	// ByLayer counts the mutants each layer killed, of Ran[layer] it ran on.
	ByLayer, Ran map[Layer]int
	// SimulationItself counts the faultsim layer's kills where
	// TestSimulation failed (not only the checks' own unit tests).
	SimulationItself int
	// Core counts the core set's mutants (Mutant.Core) run, CoreSim
	// those of them the faultsim layer killed.
	Core, CoreSim int
	// Survivors survived every layer that ran; Invalid did not compile or
	// apply; Broken could not be measured.
	Survivors, Invalid, Broken []string
}

// Summarize counts results.
func Summarize(results []Result) Summary {
	s := Summary{ByLayer: map[Layer]int{}, Ran: map[Layer]int{}}
	for _, r := range results {
		s.Total++
		for l, v := range r.Verdicts {
			if v == NotRun {
				continue
			}
			s.Ran[l]++
			if v.Dead() {
				s.ByLayer[l]++
			}
		}
		if r.Mutant.Core {
			s.Core++
			if r.Verdicts[Faultsim].Dead() {
				s.CoreSim++
			}
		}
		if slices.Contains(r.Failed[Faultsim], "TestSimulation") {
			s.SimulationItself++
		}
		switch r.Overall() {
		case Killed:
			s.Killed++
		case BuildFailed:
			s.Invalid = append(s.Invalid, r.Mutant.ID)
		case Broken:
			s.Broken = append(s.Broken, r.Mutant.ID)
		default:
			s.Survivors = append(s.Survivors, r.Mutant.ID)
		}
	}
	return s
}

// Problems lists why the run fails: survivors, invalid or unmeasured
// mutants, and a simulation that kills fewer than minSim (checked only
// when the simulation ran) of the core set, or of all mutants when none
// is marked core.
func (s Summary) Problems(layers []Layer, minSim int) []string {
	var out []string
	if len(s.Survivors) > 0 {
		out = append(out, fmt.Sprintf("%d mutant(s) survived every layer: %s", len(s.Survivors), strings.Join(s.Survivors, ", ")))
	}
	if len(s.Invalid) > 0 {
		out = append(out, fmt.Sprintf("%d mutant(s) are INVALID (they do not compile): fix the list: %s", len(s.Invalid), strings.Join(s.Invalid, ", ")))
	}
	if len(s.Broken) > 0 {
		out = append(out, fmt.Sprintf("%d mutant(s) could not be measured (a layer failed without a failing test): %s", len(s.Broken), strings.Join(s.Broken, ", ")))
	}
	switch k := s.ByLayer[Faultsim]; {
	case s.Ran[Faultsim] == 0:
	case s.Core > 0 && s.CoreSim < minSim:
		out = append(out, fmt.Sprintf("the simulation alone killed %d of the %d core mutants, fewer than the %d required", s.CoreSim, s.Core, minSim))
	case s.Core == 0 && k < minSim:
		out = append(out, fmt.Sprintf("the simulation alone killed %d of %d mutants, fewer than the %d required", k, s.Total, minSim))
	}
	return out
}

// WriteTable prints one row per mutant: each layer's verdict, marked "!"
// where the list expects that layer to kill it and it did not, then the
// overall verdict and the time taken; then the tests that killed each
// mutant and the problems of invalid or broken ones.
func WriteTable(w io.Writer, results []Result, layers []Layer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := []string{"MUTANT"}
	for _, l := range layers {
		head = append(head, strings.ToUpper(string(l)))
	}
	fmt.Fprintln(tw, strings.Join(append(head, "OVERALL", "TIME"), "\t"))
	for _, r := range results {
		row := []string{r.Mutant.ID}
		for _, l := range layers {
			v, ok := r.Verdicts[l]
			cell := string(v)
			if !ok || v == NotRun {
				cell = "-"
			}
			if ok && r.Mutant.Expects(l) && v == Survived {
				cell += "!"
			}
			row = append(row, cell)
		}
		overall := map[Verdict]string{Killed: "killed", Survived: "SURVIVED", BuildFailed: "INVALID", Broken: "ERROR"}[r.Overall()]
		row = append(row, overall, r.Duration.Round(time.Second).String())
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	tw.Flush()
	fmt.Fprintln(w, `("!": the list expects this layer to kill the mutant; "timeout" counts as killed)`)
	var notes []string
	for _, r := range results {
		for _, l := range layers {
			if names := r.Failed[l]; len(names) > 0 {
				notes = append(notes, fmt.Sprintf("  %s by %s: %s", r.Mutant.ID, l, strings.Join(firstN(names, 4), ", ")))
			}
		}
		if r.Problem != "" {
			notes = append(notes, fmt.Sprintf("  %s: %s", r.Mutant.ID, indent(r.Problem)))
		}
	}
	if len(notes) > 0 {
		fmt.Fprintln(w, "\nkilled by (first failing tests), and problems:")
		fmt.Fprintln(w, strings.Join(notes, "\n"))
	}
}

// WriteSummary prints the counts: all layers together, then each layer,
// of all mutants (an invalid one counts as not killed), except the
// integration layer, of the mutants it applies to.
func (s Summary) WriteSummary(w io.Writer, layers []Layer) {
	parts := []string{fmt.Sprintf("all together: %d/%d killed", s.Killed, s.Total)}
	for _, l := range layers {
		name := map[Layer]string{Unit: "unit tests", Faultsim: "simulation alone", Integration: "integration"}[l]
		part := fmt.Sprintf("%s: %d/%d", name, s.ByLayer[l], s.Total)
		if l == Faultsim {
			if s.Core > 0 {
				part += fmt.Sprintf(", core set %d/%d", s.CoreSim, s.Core)
			}
			part += fmt.Sprintf(" (TestSimulation itself: %d)", s.SimulationItself)
		}
		if l == Integration {
			// It runs only on the store's mutants: count of those.
			part = fmt.Sprintf("%s: %d/%d (the mutants it applies to)", name, s.ByLayer[l], s.Ran[l])
		}
		parts = append(parts, part)
	}
	fmt.Fprintln(w, strings.Join(parts, "; "))
}

func firstN(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], fmt.Sprintf("(+%d more)", len(s)-n))
	}
	return s
}

func indent(s string) string { return strings.ReplaceAll(s, "\n", "\n      ") }
