package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/genjobs/genjobs/internal/dev/workload"
	"github.com/genjobs/genjobs/internal/store"
)

// operationLister is what a resume needs of the store beyond store.Store:
// every operation it holds (both backends have it).
type operationLister interface {
	OperationIDs(ctx context.Context) ([]string, error)
}

// operations makes a resumed run's workload from its store, which is
// written before anything is sent, so it names every operation however
// the run before ended; the demo's scenarios come from the file seed
// wrote before its first POST.
func (s *stack) operations(ctx context.Context) error {
	l, ok := s.store.(operationLister)
	if !ok {
		return fmt.Errorf("local: the store %T cannot list its operations", s.store)
	}
	ids, err := l.OperationIDs(ctx)
	if err != nil {
		return fmt.Errorf("local: resume: %w", err)
	}
	if len(ids) == 0 {
		return fmt.Errorf("local: nothing to resume: the run's store (%s) holds no operation", s.where())
	}
	scenarios, err := readScenarios(s.cfg.StateDir)
	if err != nil {
		return err
	}
	for _, id := range ids {
		s.cfg.Workload = append(s.cfg.Workload, workload.Item{OperationID: id, Scenario: scenarios[id]})
	}
	return nil
}

func (s *stack) where() string {
	if s.cfg.Table != "" {
		return "table " + s.cfg.Table
	}
	return DBPath(s.cfg.StateDir)
}

// writeScenarios keeps the demo's scenarios in the run directory (a new
// file renamed into place); a workload without any writes nothing.
func writeScenarios(dir string, items []workload.Item) error {
	m := map[string]workload.Scenario{}
	for _, it := range items {
		if it.Scenario != "" {
			m[it.OperationID] = it.Scenario
		}
	}
	if len(m) == 0 {
		return nil
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, filepath.Base(scenariosPath(dir))+".*")
	if err != nil {
		return fmt.Errorf("local: scenarios: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("local: scenarios: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("local: scenarios: %w", err)
	}
	return os.Rename(tmp.Name(), scenariosPath(dir))
}

// readScenarios reads what writeScenarios kept (none when there is no
// file: a run of a workload of one's own).
func readScenarios(dir string) (map[string]workload.Scenario, error) {
	b, err := os.ReadFile(scenariosPath(dir))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	var m map[string]workload.Scenario
	if err == nil {
		err = json.Unmarshal(b, &m)
	}
	if err != nil {
		return nil, fmt.Errorf("local: the run's scenarios %s: %w", scenariosPath(dir), err)
	}
	return m, nil
}

// rearm carries a resumed run on where the run before stopped. No message
// and no worker outlived it (the state directory's lock keeps any other
// run out), so every claim is dead and every next action the records hold
// was lost with the process, whether due already or later: the resumer
// sweep takes the claims to uncertain (a POST in flight may have created a
// job), and each active record's follow-up is sent again as a handler
// would send it, at its due time, for the revision it is at (so a copy
// that survived after all would collapse with it). A scenario's POST fault
// is scripted again for an operation Genace has no job for.
func (s *stack) rearm(ctx context.Context) error {
	if s.cfg.Sim != nil {
		for _, it := range s.cfg.Workload {
			if len(s.cfg.Sim.JobsForOperation(it.OperationID)) == 0 {
				s.script(it)
			}
		}
	}
	// A claim is taken as dead once it is older than ClaimTimeout by the
	// clock: let that nanosecond pass.
	time.Sleep(time.Millisecond)
	if _, err := s.resumer.Sweep(ctx); err != nil {
		return err
	}
	active, err := s.store.Due(ctx, s.clk.Now().Add(100*365*24*time.Hour), 0)
	if err != nil {
		return fmt.Errorf("local: resume: active records: %w", err)
	}
	ctx = store.WithWriter(ctx, "resume@"+s.clk.Now().UTC().Format(time.RFC3339Nano))
	for _, stale := range active {
		rec, err := s.store.Get(ctx, stale.OperationID)
		if err != nil {
			return fmt.Errorf("local: resume: %w", err)
		}
		if rec.Schedule == nil {
			continue // a claim the sweep could not take: the periodic sweep will
		}
		if err := s.follow.Emit(ctx, &rec, 0); err != nil {
			return fmt.Errorf("local: resume: %w", err)
		}
	}
	return nil
}
