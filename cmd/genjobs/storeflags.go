package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"github.com/spf13/pflag"
	"os"
	"path/filepath"
	"sync"

	appconfig "github.com/genjobs/genjobs/internal/config"
	"github.com/genjobs/genjobs/internal/dev/genacesim"
	"github.com/genjobs/genjobs/internal/genace"
	"github.com/genjobs/genjobs/internal/store"
	"github.com/genjobs/genjobs/internal/store/bolt"
	"github.com/genjobs/genjobs/internal/store/dynamo"
)

type storeFlags struct {
	db       string
	table    string
	endpoint string
	json     bool
	// write opens the embedded store for writing (replay); the other
	// commands only read it and open it read-only.
	write bool
}

func (s *storeFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&s.db, "db", os.Getenv("GENJOBS_DB"), "embedded store file (default "+defaultDB+": the newest genjobs local run; env GENJOBS_DB)")
	fs.StringVar(&s.table, "table", os.Getenv("TABLE_NAME"), "DynamoDB table (instead of the embedded store)")
	fs.StringVar(&s.endpoint, "dynamodb-endpoint", "", "DynamoDB endpoint, e.g. DynamoDB Local (sets AWS_ENDPOINT_URL_DYNAMODB)")
	fs.BoolVar(&s.json, "json", false, "print JSON")
}

// open returns the store the flags name. An embedded store that does not
// exist is an error, not a new empty file: a typo must not look like "no
// reviews".
func (s *storeFlags) open(ctx context.Context) (store.Store, error) {
	if s.table != "" && s.db != "" && os.Getenv("GENJOBS_DB") != s.db {
		return nil, usagef("--db and --table name two different stores; give one")
	}
	if s.table != "" {
		if s.endpoint != "" {
			// The SDK's own variable, so no endpoint code path exists.
			if err := os.Setenv("AWS_ENDPOINT_URL_DYNAMODB", s.endpoint); err != nil {
				return nil, err
			}
		}
		client, err := dynamo.NewClient(ctx)
		if err != nil {
			return nil, err
		}
		// The stack's retention (its functions get these variables from
		// template.yaml; the defaults are the parameters' defaults), so an
		// operator's audit entry and closed review expire as theirs do.
		records, audit, err := appconfig.LoadRetention(os.Getenv)
		if err != nil {
			return nil, usagef("%v", err)
		}
		return dynamo.New(client, s.table).WithRetention(dynamo.Retention{Records: records, Audit: audit}, nil), nil
	}
	path := s.db
	if path == "" {
		path = defaultDB
	}
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		abs, _ := filepath.Abs(path)
		return nil, fmt.Errorf("no embedded store at %s (run the local stack first, or pass --db / --table)", abs)
	}
	return bolt.OpenExisting(path, !s.write)
}

// localSim restores the simulator a local run saved next to the embedded
// store the flags name, with that run's directory; nil when there is none
// (a DynamoDB table, or a run against another Genace).
func (s *storeFlags) localSim() (*genacesim.Simulator, string) {
	if s.table != "" {
		return nil, ""
	}
	dir := filepath.Dir(cmp.Or(s.db, defaultDB))
	sim, err := loadSim(dir, localSimKey)
	if err != nil {
		return nil, ""
	}
	return sim, dir
}

// addressed is the flags that name this store in a printed command: the
// table (with its endpoint) or the embedded store's file, the default
// resolved to the run it is now, so the command reaches this store
// whatever run is newest by then.
func (s *storeFlags) addressed() string {
	switch {
	case s.table != "":
		return addressing("", s.table, s.endpoint).Store
	case s.db != "":
		return shellJoin([]string{"--db", s.db})
	}
	return addressing(resolved(filepath.Dir(defaultDB)), "", "").Store
}

// resumeCommand is the command that carries out what a replay left
// scheduled on the local run whose store the flags name: that run's own
// directory, so it runs as printed whatever run is newest by then.
func (s *storeFlags) resumeCommand() string {
	dir := resolved(filepath.Dir(cmp.Or(s.db, defaultDB)))
	return self() + " local --resume " + addressing(dir, "", "").Resume
}

// localGenace is the simulator a local run saved next to its store,
// served on loopback, so that replay looks job ids up where the run's
// jobs are.
type localGenace struct {
	// Client reads jobs from it; Sim is the simulator itself, which (unlike
	// Genace) can be searched for an operation's jobs.
	Client *genace.Client
	Sim    *genacesim.Simulator
	// save writes what lookups changed back into the run (safe for
	// concurrent use); stop stops the server, then saves.
	save, stop func() error
}

// localGenace serves the simulator a local run saved next to the store
// (localSim) on loopback; nil when the flags name no such run.
func (s *storeFlags) localGenace() (*localGenace, error) {
	sim, runDir := s.localSim()
	if sim == nil {
		return nil, nil
	}
	base, stopSim, err := sim.Start("127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	l := &localGenace{Sim: sim}
	l.save = func() error {
		mu.Lock()
		defer mu.Unlock()
		return saveSim(runDir, sim)
	}
	l.stop = func() error { stopSim(); return l.save() }
	if l.Client, err = genace.New(base, localSimKey, nil); err != nil {
		_ = l.stop()
		return nil, err
	}
	return l, nil
}
