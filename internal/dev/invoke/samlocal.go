package invoke

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/genjobs/genjobs/internal/dev/samlocal"
	"github.com/genjobs/genjobs/internal/operation"
)

// SAMLocalDir is where `make sam-env` writes the files `sam local invoke`
// takes, relative to the module root.
const SAMLocalDir = ".cache/sam-local"

// SAMLocal is a stack kept up for `sam local invoke`, with every sample
// operation seeded, its --env-vars file and --parameter-overrides, and
// copies of the sample events naming the seeded jobs' ids.
type SAMLocal struct {
	Stack *Stack
	Files SAMFiles
	// Dir holds the files; Events the rewritten events (Dir/events).
	Dir, Events string
	// Rewritten lists the event files that needed a rewritten copy.
	Rewritten []string
}

// PrepareSAMLocal stands up the stack, seeds the samples and writes the
// files into dir (relative to root unless absolute). Close removes the
// stack, not the files.
func PrepareSAMLocal(ctx context.Context, root string, tmpl *samlocal.Template, ep Endpoints, dir string) (_ *SAMLocal, err error) {
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(root, dir)
	}
	s := &SAMLocal{Dir: dir, Events: filepath.Join(dir, "events")}
	if s.Stack, err = NewStack(ctx, StackConfig{Template: tmpl, Endpoints: ep, Prefix: "genjobs-sam"}); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	ids := slices.Sorted(maps.Keys(Samples))
	seeded, err := Seed(ctx, s.Stack, ids, time.Now().UTC())
	if err != nil {
		return nil, err
	}
	if err := os.RemoveAll(s.Events); err != nil {
		return nil, err
	}
	if s.Files, err = s.Stack.WriteSAMFiles(dir); err != nil {
		return nil, err
	}
	events, err := rewriteEvents(root, seeded)
	if err != nil {
		return nil, err
	}
	for _, name := range slices.Sorted(maps.Keys(events)) {
		if err := os.MkdirAll(s.Events, 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(s.Events, name), events[name], 0o644); err != nil {
			return nil, err
		}
		s.Rewritten = append(s.Rewritten, name)
	}
	return s, nil
}

// rewriteEvents is Rewrite of every sample event in root's events/ onto
// the seeded records: the payloads that changed, by file name.
func rewriteEvents(root string, seeded map[string]operation.Record) (map[string][]byte, error) {
	files, err := filepath.Glob(filepath.Join(root, "events", "*.json"))
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	for _, file := range files {
		ev, err := ReadEvent(file)
		if err != nil {
			return nil, err
		}
		payload, notes, err := Rewrite(ev, seeded)
		if err != nil {
			return nil, err
		}
		if len(notes) > 0 {
			out[filepath.Base(file)] = payload
		}
	}
	return out, nil
}

// Close removes the stack.
func (s *SAMLocal) Close() { s.Stack.Close() }

// SAMCommands build the functions and invoke each with its sample event
// on the stack `make sam-env` keeps up, its files in dir (relative to the
// module root), rewritten the events with a copy there; README.md shows
// these lines. --docker-network host lets the container reach the local
// services on the host's loopback (Linux).
func SAMCommands(tmpl *samlocal.Template, dir string, rewritten []string) []string {
	out := []string{"sam build --build-in-source"}
	for _, f := range Functions(tmpl) {
		event := f.Name + ".json"
		path := "events/" + event
		if slices.Contains(rewritten, event) {
			path = dir + "/events/" + event
		}
		out = append(out, fmt.Sprintf(`sam local invoke %s -e %s --env-vars %s/%s --parameter-overrides "$(cat %s/%s)" --docker-network host`,
			f.LogicalID, path, dir, EnvFileName, dir, ParametersFileName))
	}
	return out
}

// SampleRewrites are the sample events Rewrite changes once the samples
// are seeded (those naming a seeded job): the ones PrepareSAMLocal writes
// rewritten copies of.
func SampleRewrites(root string) ([]string, error) {
	stand := map[string]operation.Record{}
	for id, s := range Samples {
		if s.Placeholder != "" {
			stand[id] = operation.Record{OperationID: id, RemoteJobID: "job-" + id}
		}
	}
	events, err := rewriteEvents(root, stand)
	return slices.Sorted(maps.Keys(events)), err
}
