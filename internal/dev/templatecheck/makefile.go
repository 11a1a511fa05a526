package templatecheck

import (
	"regexp"
	"strings"
)

// makefile is the little of a GNU Makefile the build rule reads: variable
// assignments and each rule's recipe lines.
type makefile struct {
	vars  map[string]string
	rules map[string][]string
}

var (
	assignment = regexp.MustCompile(`^(?:export\s+|override\s+)?([A-Za-z_][A-Za-z0-9_.]*)\s*(?:\?=|::=|:=|\+=|=)\s*(.*)$`)
	ruleLine   = regexp.MustCompile(`^([^\t#=:][^=:]*?)\s*::?(?:\s+(.*)|;(.*)|$)`)
	varRef     = regexp.MustCompile(`\$[({]([A-Za-z_][A-Za-z0-9_.]*)[)}]`)
)

// parseMakefile reads assignments and rules; backslash-newlines join lines.
func parseMakefile(text string) *makefile {
	mk := &makefile{vars: map[string]string{}, rules: map[string][]string{}}
	text = strings.ReplaceAll(text, "\\\n", " ")
	var current []string // targets whose recipe is being read
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "\t") {
			for _, t := range current {
				mk.rules[t] = append(mk.rules[t], strings.TrimSpace(line))
			}
			continue
		}
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue // blank lines and comments do not end a recipe in GNU make
		}
		current = nil
		if m := assignment.FindStringSubmatch(line); m != nil {
			mk.vars[m[1]] = strings.Join(strings.Fields(m[2]), " ")
			continue
		}
		if m := ruleLine.FindStringSubmatch(line); m != nil {
			current = strings.Fields(m[1])
			for _, t := range current {
				if _, ok := mk.rules[t]; !ok {
					mk.rules[t] = nil
				}
				if inline := strings.TrimSpace(m[3]); inline != "" {
					mk.rules[t] = append(mk.rules[t], inline)
				}
			}
		}
	}
	return mk
}

// recipe is target's recipe: its own rule's, or else a pattern rule's
// ("build-%Function") with $* the stem and $(call lower,$*) the stem in
// lower case, the one function the Makefile's build rule calls.
func (mk *makefile) recipe(target string) ([]string, bool) {
	if r, ok := mk.rules[target]; ok {
		return r, true
	}
	for pattern, r := range mk.rules {
		prefix, suffix, ok := strings.Cut(pattern, "%")
		if !ok || len(target) <= len(prefix)+len(suffix) || !strings.HasPrefix(target, prefix) || !strings.HasSuffix(target, suffix) {
			continue
		}
		stem := target[len(prefix) : len(target)-len(suffix)]
		out := make([]string, len(r))
		for i, line := range r {
			line = strings.ReplaceAll(line, "$(call lower,$*)", strings.ToLower(stem))
			out[i] = strings.ReplaceAll(line, "$*", stem)
		}
		return out, true
	}
	return nil, false
}

// expand replaces $(VAR) and ${VAR} by the variables' values, repeatedly;
// references to variables the Makefile does not set (ARTIFACTS_DIR, set by
// sam build) and function calls stay as written.
func (mk *makefile) expand(s string) string {
	for range 10 {
		next := varRef.ReplaceAllStringFunc(s, func(ref string) string {
			name := varRef.FindStringSubmatch(ref)[1]
			if v, ok := mk.vars[name]; ok {
				return v
			}
			return ref
		})
		if next == s {
			break
		}
		s = next
	}
	return s
}
