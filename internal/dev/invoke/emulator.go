package invoke

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/genjobs/genjobs/internal/dev/emulator"
)

// InvokePath is the emulator's invocation endpoint. The emulator serves
// one function, and only under the name "function".
const InvokePath = emulator.InvokePath

// RIEPath is where `bash .ci/rie.sh install` puts the AWS Lambda Runtime
// Interface Emulator, relative to the module root.
const RIEPath = emulator.Path

// BuildDir is where the bootstraps are built, relative to the module
// root: BuildDir/FUNCTION/bootstrap.
const BuildDir = ".cache/invoke"

// endLineWait bounds how long Invoke waits for a failed invocation's
// output to settle, so the log it returns is complete.
const endLineWait = 2 * time.Second

// FindRoot returns the module root: the nearest folder with a go.mod,
// from dir upwards.
func FindRoot(dir string) (string, error) {
	root, err := emulator.FindRoot(dir)
	if errors.Is(err, emulator.ErrNoModule) {
		return "", fmt.Errorf("%w: run from inside the genjobs checkout", err)
	}
	return root, err
}

// Build compiles functions/NAME into BuildDir/NAME/bootstrap, the way
// deployment does (linux, no cgo, -tags lambda.norpc, stripped) but for
// this machine's architecture, since the emulator runs it here. Each
// process builds a function once; go's build cache keeps a rebuild cheap.
func Build(ctx context.Context, root, name string) (string, error) {
	if _, err := os.Stat(filepath.Join(root, "functions", name)); err != nil {
		return "", fmt.Errorf("build %s: functions/%s does not exist in %s", name, name, root)
	}
	return emulator.Build(ctx, root, "./functions/"+name, filepath.Join(root, BuildDir, name))
}

// EmulatorConfig describes one function under the emulator.
type EmulatorConfig = emulator.Config

// Emulator is one running aws-lambda-rie with its bootstrap. Its methods
// are safe for concurrent use.
type Emulator struct{ *emulator.Emulator }

// StartEmulator starts the emulator on two free loopback ports and waits
// until it accepts invocations. The bootstrap itself starts on the first
// invocation, as Lambda's init does. Stop ends both.
func StartEmulator(cfg EmulatorConfig) (*Emulator, error) {
	if _, err := os.Stat(cfg.RIE); err != nil {
		return nil, fmt.Errorf("the Lambda Runtime Interface Emulator is not installed at %s: run `bash .ci/rie.sh install` (make invoke does)", cfg.RIE)
	}
	e, err := emulator.Start(cfg)
	if err != nil {
		return nil, err
	}
	return &Emulator{e}, nil
}

// Invoke is emulator.Emulator's Invoke, and after an answer other than a 200
// (the runtime crashed or failed its init) it waits until the output has
// been quiet for a moment, so Stdout and Stderr hold the runtime's last
// words.
func (e *Emulator) Invoke(ctx context.Context, payload []byte) (status int, body []byte, err error) {
	status, body, err = e.Emulator.Invoke(ctx, payload)
	if err == nil && status != http.StatusOK {
		e.WaitQuiet(300*time.Millisecond, endLineWait)
	}
	return status, body, err
}
