package operator

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Local state layout under the state root (`genjobs local --state`,
// default .genjobs):
//
//	.genjobs/runs/<run id>/   one `genjobs local` run: genjobs.db, artifacts/, report.json
//	.genjobs/latest           a symlink to the newest run; operator commands default to it
const (
	DefaultStateRoot = ".genjobs"
	LatestLink       = "latest"
)

// DBPath is a run directory's embedded store.
func DBPath(runDir string) string { return filepath.Join(runDir, "genjobs.db") }

// DefaultDB is the embedded store of the newest local run.
var DefaultDB = DBPath(filepath.Join(DefaultStateRoot, LatestLink))

// Self is how to run this binary again, for hints that must run as
// printed: `genjobs` when that is what the PATH finds, `go run
// ./cmd/genjobs` under go run, else the executable's path.
func Self() string {
	exe, err := os.Executable()
	if err != nil {
		return "genjobs"
	}
	if onPath, err := exec.LookPath("genjobs"); err == nil {
		if a, b := Resolved(onPath), Resolved(exe); a == b {
			return "genjobs"
		}
	}
	if strings.Contains(exe, string(filepath.Separator)+"go-build") {
		return "go run ./cmd/genjobs"
	}
	return exe
}

// Resolved is p with its symlinks resolved, or p when that fails.
func Resolved(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return p
}

// Addressing is what the hints of a local run add so that each runs as
// printed whatever run is newest by then.
type Addressing struct {
	// Store is what an operator command (reviews, plan, replay, audit)
	// adds: --db with the run's own store file, or --table.
	Store string
	// Resume is what `local --resume` adds: the run's directory, and the
	// --table it was given.
	Resume string
}

// Address is the Addressing of the local run in runDir: the run's own
// store (--db, or --table with its endpoint) for the operator commands,
// and for `local --resume` the run's directory (under the --state root
// it was given, so that flag is not needed again) with the --table.
func Address(runDir, table, endpoint string) Addressing {
	var storeArgs []string
	if table != "" {
		storeArgs = append(storeArgs, "--table", table)
		if endpoint != "" {
			storeArgs = append(storeArgs, "--dynamodb-endpoint", endpoint)
		}
	} else {
		storeArgs = append(storeArgs, "--db", DBPath(runDir))
	}
	resume := []string{"--run", runDir}
	if table != "" {
		resume = append(resume, storeArgs...)
	}
	return Addressing{Store: shellJoin(storeArgs), Resume: shellJoin(resume)}
}

// shellJoin joins args for a POSIX shell, quoting those that need it.
func shellJoin(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if a != "" && strings.Trim(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=@+,") == "" {
			out[i] = a
		} else {
			out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(out, " ")
}
