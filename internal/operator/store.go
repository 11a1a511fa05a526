package operator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"github.com/spf13/pflag"
	"os"
	"path/filepath"

	appconfig "github.com/genjobs/genjobs/internal/config"
	"github.com/genjobs/genjobs/internal/replay"
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
	fs.StringVar(&s.db, "db", os.Getenv("GENJOBS_DB"), "embedded store file (default "+DefaultDB+": the newest genjobs local run; env GENJOBS_DB)")
	fs.StringVar(&s.table, "table", os.Getenv("TABLE_NAME"), "DynamoDB table (instead of the embedded store)")
	fs.StringVar(&s.endpoint, "dynamodb-endpoint", "", "DynamoDB endpoint, e.g. DynamoDB Local (sets AWS_ENDPOINT_URL_DYNAMODB)")
	fs.BoolVar(&s.json, "json", false, "print JSON")
}

// open returns the store the flags name. An embedded store that does not
// exist is an error, not a new empty file: a typo must not look like "no
// reviews".
func (s *storeFlags) open(ctx context.Context) (store.Store, error) {
	if s.table != "" && s.db != "" && os.Getenv("GENJOBS_DB") != s.db {
		return nil, Usagef("--db and --table name two different stores; give one")
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
			return nil, Usagef("%v", err)
		}
		return dynamo.New(client, s.table).WithRetention(dynamo.Retention{Records: records, Audit: audit}, nil), nil
	}
	path := s.db
	if path == "" {
		path = DefaultDB
	}
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		abs, _ := filepath.Abs(path)
		return nil, fmt.Errorf("no embedded store at %s (run the local stack first, or pass --db / --table)", abs)
	}
	return bolt.OpenExisting(path, !s.write)
}

// addressed is the flags that name this store in a printed command: the
// table (with its endpoint) or the embedded store's file, the default
// resolved to the run it is now, so the command reaches this store
// whatever run is newest by then.
func (s *storeFlags) addressed() string {
	switch {
	case s.table != "":
		return Address("", s.table, s.endpoint).Store
	case s.db != "":
		return shellJoin([]string{"--db", s.db})
	}
	return Address(Resolved(filepath.Dir(DefaultDB)), "", "").Store
}

// resumeCommand is the command that carries out what a replay left
// scheduled on the local run whose store the flags name: that run's own
// directory, so it runs as printed whatever run is newest by then.
func (s *storeFlags) resumeCommand() string {
	dir := Resolved(filepath.Dir(cmp.Or(s.db, DefaultDB)))
	return Self() + " local --resume " + Address(dir, "", "").Resume
}

// LocalGenace returns the Genace of the local run whose embedded store
// is at db: the simulator that run saved, served by the local tooling for
// as long as a replay or the console needs it, so job ids are looked up
// where the run's jobs are. It returns nil, nil when db is no such run's.
// The operator package never starts a simulator: on a table, Genace is
// the one --genace-url names.
type LocalGenace func(db string) (*LocalRun, error)

// LocalRun is a local run's Genace while a command uses it.
type LocalRun struct {
	// Reader reads jobs from it; Search lists an operation's jobs (a
	// simulator, unlike Genace, can be searched).
	Reader replay.JobReader
	Search replay.JobSearcher
	// Save writes what lookups changed back into the run (safe for
	// concurrent use); Stop stops serving, then saves.
	Save, Stop func() error
}

// localRun is the Genace of the local run whose store the flags name, or
// nil (a table, no local tooling, or a run against another Genace).
func (s *storeFlags) localRun(local LocalGenace) (*LocalRun, error) {
	if s.table != "" || local == nil {
		return nil, nil
	}
	return local(cmp.Or(s.db, DefaultDB))
}
