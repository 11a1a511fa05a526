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

// operations makes a resumed run's workload from its store, which holds
// every operation whose record was written, so every one that may have
// been sent anywhere, however the run before ended. The workload file
// seed wrote before its first record adds the demo's scenarios, and the
// operations a run killed while seeding never created (rearm creates
// them).
func (s *localRun) operations(ctx context.Context) error {
	l, ok := s.store.(operationLister)
	if !ok {
		return fmt.Errorf("local: the store %T cannot list its operations", s.store)
	}
	ids, err := l.OperationIDs(ctx)
	if err != nil {
		return fmt.Errorf("local: resume: %w", err)
	}
	kept, err := readWorkload(s.cfg.StateDir)
	if err != nil {
		return err
	}
	inStore := map[string]bool{}
	for _, id := range ids {
		inStore[id] = true
	}
	byID := map[string]workload.Item{}
	for _, it := range kept {
		byID[it.OperationID] = it
		if !inStore[it.OperationID] {
			s.unseeded = append(s.unseeded, it)
		}
	}
	if len(ids)+len(s.unseeded) == 0 {
		return fmt.Errorf("local: nothing to resume: the run's store (%s) holds no operation", s.where())
	}
	others := notIn(ids, byID)
	if s.cfg.Table != "" && len(others) > 0 {
		// A resume sweeps and re-sends every active record of its store:
		// on a table another run shares, it would take that run's live
		// claims for dead and drive its operations on this run's Genace.
		return fmt.Errorf("local: resume: table %s holds %d operations this run did not create (%s first); "+
			"a resume drives every operation of its store, so give each local run a table of its own", s.cfg.Table, len(others), others[0])
	}
	// In the workload's order, then any the store has beyond it (a run's
	// own bbolt store: from before the workload was kept).
	s.cfg.Workload = kept
	for _, id := range others {
		s.cfg.Workload = append(s.cfg.Workload, workload.Item{OperationID: id})
	}
	return nil
}

// notIn lists the ids that byID lacks, in their order.
func notIn(ids []string, byID map[string]workload.Item) []string {
	var out []string
	for _, id := range ids {
		if _, ok := byID[id]; !ok {
			out = append(out, id)
		}
	}
	return out
}

func (s *localRun) where() string {
	if s.cfg.Table != "" {
		return "table " + s.cfg.Table
	}
	return DBPath(s.cfg.StateDir)
}

// keptItem is a workload item as the run directory keeps it, its demo
// scenario included.
type keptItem struct {
	workload.Item
	Scenario workload.Scenario `json:"scenario,omitempty"`
}

// writeWorkload keeps the run's workload in its directory (a new file
// renamed into place), before any record is written.
func writeWorkload(dir string, items []workload.Item) error {
	kept := make([]keptItem, len(items))
	for i, it := range items {
		kept[i] = keptItem{Item: it, Scenario: it.Scenario}
	}
	b, err := json.Marshal(kept)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, filepath.Base(workloadPath(dir))+".*")
	if err != nil {
		return fmt.Errorf("local: keep the workload: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("local: keep the workload: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("local: keep the workload: %w", err)
	}
	return os.Rename(tmp.Name(), workloadPath(dir))
}

// readWorkload reads what writeWorkload kept (nothing for a run from
// before it was kept).
func readWorkload(dir string) ([]workload.Item, error) {
	b, err := os.ReadFile(workloadPath(dir))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	var kept []keptItem
	if err == nil {
		err = json.Unmarshal(b, &kept)
	}
	if err != nil {
		return nil, fmt.Errorf("local: the run's workload %s: %w", workloadPath(dir), err)
	}
	items := make([]workload.Item, len(kept))
	for i, k := range kept {
		items[i] = k.Item
		items[i].Scenario = k.Scenario
	}
	return items, nil
}

// rearm carries a resumed run on where the run before stopped. No message
// and no worker outlived it (the state directory's lock keeps any other
// run out), so every claim is dead and every next action the records hold
// was lost with the process, whether due already or later: the resumer
// sweep takes the claims to uncertain (a POST in flight may have created a
// job), and each active record's follow-up is sent again as a handler
// would send it, at its due time, for the revision it is at (so a copy
// that survived after all would collapse with it). A scenario's POST fault
// is scripted again for an operation Genace has no job for, and an
// operation the run never created is created now.
func (s *localRun) rearm(ctx context.Context) error {
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
	if err := s.resumer(ctx); err != nil {
		return err
	}
	// Operations a run killed while seeding never created: nothing was
	// sent for them.
	if err := s.create(ctx, s.unseeded); err != nil {
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
		if !rec.Active() || rec.Schedule == nil {
			// A claim the sweep could not take (the periodic sweep will),
			// or a record in the index only for its unsent event (the
			// resumed run's first sweep sends it).
			continue
		}
		if err := s.follow.Emit(ctx, &rec, 0); err != nil {
			return fmt.Errorf("local: resume: %w", err)
		}
	}
	return nil
}
