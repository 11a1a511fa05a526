// Package emulator runs a genjobs function the way AWS Lambda runs it: the
// function's package is built into a `bootstrap` executable as for
// deployment (linux, no cgo, -tags lambda.norpc, stripped) but for this
// machine's architecture, and that executable is started under the AWS
// Lambda Runtime Interface Emulator (aws-lambda-rie), the emulator `sam
// local invoke` runs inside its container. It serves the Lambda Runtime
// API to the bootstrap and accepts invocations over HTTP, so a caller
// exercises the real composition root (environment parsing, cold-start
// client construction, lambda.Start, JSON in and out, exit codes).
//
// Every emulator gets two free loopback ports of its own, so several may
// run at once. It is the one runner behind `genjobs invoke`, the function
// tests (internal/dev/lambdatest) and the cold-start benchmark.
package emulator

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
)

// InvokePath is the emulator's invocation endpoint. The emulator serves
// one function, and only under the name "function".
const InvokePath = "/2015-03-31/functions/function/invocations"

// Path is where `bash .ci/rie.sh install` puts the emulator, relative to
// the module root.
const Path = ".cache/bin/aws-lambda-rie"

// BuildDir is where Build puts bootstraps, relative to the module root:
// in the checkout's own ignored build/ folder, since .cache may be shared
// by several checkouts whose functions differ.
const BuildDir = "build/host"

// ErrNotInstalled is Installed's (and Start's) answer when the emulator
// is missing.
var ErrNotInstalled = errors.New("the Lambda Runtime Interface Emulator is not installed at " + Path + ": run `bash .ci/rie.sh install`")

// Installed returns the emulator under root, or ErrNotInstalled.
func Installed(root string) (string, error) {
	p := filepath.Join(root, Path)
	if _, err := os.Stat(p); err != nil {
		return p, ErrNotInstalled
	}
	return p, nil
}

// builds makes concurrent callers in one process (tests in parallel, or
// every sample event at once) share one build per package.
var builds sync.Map // root NUL pkg -> *build

type build struct {
	once sync.Once
	path string
	err  error
}

// Build compiles fn (a folder under functions/, or a "./" package path)
// with Compile for the host's GOARCH into BuildDir/PKG/bootstrap under
// root and returns its path. Each process builds a package once; a failed
// build is not remembered, so a later call may succeed.
func Build(ctx context.Context, root, fn string) (string, error) {
	pkg := fn
	if !strings.HasPrefix(pkg, "./") {
		pkg = "./functions/" + fn
		if _, err := os.Stat(filepath.Join(root, "functions", fn)); err != nil {
			return "", fmt.Errorf("build %s: functions/%s does not exist in %s", fn, fn, root)
		}
	}
	key := root + "\x00" + pkg
	v, _ := builds.LoadOrStore(key, &build{})
	b := v.(*build)
	b.once.Do(func() { b.path, b.err = buildBootstrap(ctx, root, pkg, filepath.Join(root, BuildDir, pkg)) })
	if b.err != nil {
		builds.CompareAndDelete(key, b)
	}
	return b.path, b.err
}

// buildBootstrap builds in a private folder and renames the binary into
// place, so two processes building the same function at once never
// execute or overwrite a half-written file.
func buildBootstrap(ctx context.Context, root, pkg, dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("build %s: %w", pkg, err)
	}
	tmp, err := os.MkdirTemp(dir, ".build-")
	if err != nil {
		return "", fmt.Errorf("build %s: %w", pkg, err)
	}
	defer os.RemoveAll(tmp)
	if err := Compile(ctx, root, pkg, runtime.GOARCH, filepath.Join(tmp, "bootstrap")); err != nil {
		return "", err
	}
	path := filepath.Join(dir, "bootstrap")
	if err := os.Rename(filepath.Join(tmp, "bootstrap"), path); err != nil {
		return "", fmt.Errorf("build %s: %w", pkg, err)
	}
	return path, nil
}

// Compile builds pkg (module-relative, "./...") under root into out as
// deployment does (Makefile `build`: linux, no cgo, -tags lambda.norpc,
// -trimpath, stripped), for goarch.
func Compile(ctx context.Context, root, pkg, goarch, out string) error {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("build %s: go not found on PATH (it builds the bootstrap): %w", pkg, err)
	}
	cmd := exec.CommandContext(ctx, goBin, "build", "-tags", "lambda.norpc", "-trimpath", "-ldflags=-s -w", "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+goarch, "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build %s for linux/%s: %w\n%s", pkg, goarch, err, b)
	}
	return nil
}

// Tail keeps the last n bytes of s, for error messages and failure logs.
func Tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
