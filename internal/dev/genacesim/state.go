package genacesim

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"time"

	"github.com/genjobs/genjobs/internal/clock"
)

// snapshotVersion changes whenever the saved form does.
const snapshotVersion = 1

// snapshot is what Save writes: every job Genace knows (outputs are
// re-rendered from the seed and the job id, so they are not saved) and the
// request counts, so a resumed local run continues the same Genace.
type snapshot struct {
	Version int `json:"version"`
	// Config is the simulator's configuration without its API key;
	// Restore builds the simulator from it.
	Config     savedConfig    `json:"config"`
	Seed       int64          `json:"seed"`
	Jobs       []savedJob     `json:"jobs"`
	PostCount  map[string]int `json:"post_count"`
	GetCount   map[string]int `json:"get_count"`
	FileCount  map[string]int `json:"file_count"`
	TotalPosts int            `json:"total_posts"`
	TotalGets  int            `json:"total_gets"`
	FileGets   int            `json:"file_gets"`
}

type savedConfig struct {
	DefaultModel       ModelConfig            `json:"default_model"`
	Models             map[string]ModelConfig `json:"models,omitempty"`
	RefundSettleAfter  time.Duration          `json:"refund_settle_after"`
	SignedURLTTL       time.Duration          `json:"signed_url_ttl"`
	MaxWait            time.Duration          `json:"max_wait"`
	RateLimitPerSecond int                    `json:"rate_limit_per_second,omitempty"`
}

type savedJob struct {
	ID          string            `json:"id"`
	OperationID string            `json:"operation_id"`
	Model       string            `json:"model"`
	Config      ModelConfig       `json:"config"`
	Metadata    map[string]string `json:"metadata,omitempty"`
	Created     time.Time         `json:"created"`
	SubFail     bool              `json:"submission_failed,omitempty"`
	SubSettled  *time.Time        `json:"submission_refund_settled,omitempty"`
	Reconciled  *time.Time        `json:"reconciled,omitempty"`
}

// Save writes the simulator's jobs and counts as JSON: what `genjobs
// local` keeps in its run directory so that an operator's replay can look
// a job up afterwards and `genjobs local --resume` continues against the
// same Genace. Scripts and fault settings are not saved.
func (s *Simulator) Save(w io.Writer) error {
	s.mu.Lock()
	c := s.cfg
	snap := snapshot{Version: snapshotVersion, Seed: c.Seed,
		Config: savedConfig{DefaultModel: c.DefaultModel, Models: maps.Clone(c.Models), RefundSettleAfter: c.RefundSettleAfter,
			SignedURLTTL: c.SignedURLTTL, MaxWait: c.MaxWait, RateLimitPerSecond: c.RateLimitPerSecond},
		PostCount: maps.Clone(s.postCount), GetCount: maps.Clone(s.getCount), FileCount: maps.Clone(s.fileCount),
		TotalPosts: s.totalPosts, TotalGets: s.totalGets, FileGets: s.fileGets}
	for _, j := range s.order {
		snap.Jobs = append(snap.Jobs, savedJob{ID: j.id, OperationID: j.opID, Model: j.model, Config: j.mc, Metadata: maps.Clone(j.metadata),
			Created: j.created, SubFail: j.subFail, SubSettled: j.subSettled, Reconciled: j.reconciled})
	}
	s.mu.Unlock()
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(snap)
}

// Restore builds the simulator Save described, with apiKey and clk: the
// same configuration and jobs, whose states go on from their saved times
// by clk.
func Restore(r io.Reader, apiKey string, clk clock.Clock) (*Simulator, error) {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	var snap snapshot
	if err := dec.Decode(&snap); err != nil {
		return nil, fmt.Errorf("genace simulator state: %w", err)
	}
	if snap.Version != snapshotVersion {
		return nil, fmt.Errorf("genace simulator state: version %d, want %d", snap.Version, snapshotVersion)
	}
	c := snap.Config
	s := New(Config{APIKey: apiKey, Seed: snap.Seed, DefaultModel: c.DefaultModel, Models: c.Models, RefundSettleAfter: c.RefundSettleAfter,
		SignedURLTTL: c.SignedURLTTL, MaxWait: c.MaxWait, RateLimitPerSecond: c.RateLimitPerSecond}, clk)
	if err := s.load(snap); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Simulator) load(snap snapshot) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sj := range snap.Jobs {
		if sj.ID == "" || s.jobs[sj.ID] != nil {
			return fmt.Errorf("genace simulator state: job id %q empty or repeated", sj.ID)
		}
		j := &job{id: sj.ID, opID: sj.OperationID, model: sj.Model, mc: sj.Config, metadata: sj.Metadata, created: sj.Created,
			subFail: sj.SubFail, subSettled: sj.SubSettled, reconciled: sj.Reconciled}
		s.addLocked(j)
	}
	maps.Copy(s.postCount, snap.PostCount)
	maps.Copy(s.getCount, snap.GetCount)
	maps.Copy(s.fileCount, snap.FileCount)
	s.totalPosts, s.totalGets, s.fileGets = snap.TotalPosts, snap.TotalGets, snap.FileGets
	// New ids must not follow the saved run's sequence: the rng would
	// repeat it. newJobLocked skips taken ids; advancing past them keeps
	// that loop short.
	for range len(snap.Jobs) * 20 {
		s.rng.IntN(len(idAlphabet))
	}
	return nil
}
