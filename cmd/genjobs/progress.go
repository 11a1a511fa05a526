package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/genjobs/genjobs/internal/dev/pipeline"
	"github.com/genjobs/genjobs/internal/notify"
)

// progressView shows a local run's progress: a live bar when stdout is a
// terminal, otherwise a plain line each time something changed (never the
// same line again).
type progressView struct {
	mu      sync.Mutex // updates and events come from different goroutines
	w       io.Writer
	bar     *progressbar.ProgressBar
	lastKey string
	lastMsg string
}

func newProgressView(w io.Writer) *progressView {
	v := &progressView{w: w}
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		v.bar = progressbar.NewOptions(-1, progressbar.OptionSetWriter(w), progressbar.OptionShowCount(),
			progressbar.OptionSetWidth(30), progressbar.OptionSetPredictTime(false), progressbar.OptionFullWidth(),
			progressbar.OptionThrottle(200*time.Millisecond), progressbar.OptionClearOnFinish())
	}
	return v
}

func (v *progressView) update(st pipeline.Status) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.bar != nil {
		v.bar.ChangeMax(st.Total)
		v.bar.Describe(st.Line())
		_ = v.bar.Set(st.Settled)
		// A problem stays on screen above the bar.
		if st.Genace != "" && st.Genace != v.lastMsg {
			_ = v.bar.Clear()
			fmt.Fprintf(v.w, "Genace: %s\n", st.Genace)
		}
		v.lastMsg = st.Genace
		return
	}
	if key := st.Key(); key != v.lastKey {
		fmt.Fprintf(v.w, "[%s] %s\n", time.Now().Format("15:04:05"), st.Line())
		v.lastKey = key
	}
}

// event shows a completion event the run wrote, above the bar if any.
func (v *progressView) event(ev notify.Event) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.bar != nil {
		_ = v.bar.Clear()
	}
	phase := string(ev.Detail.Phase)
	if ev.Detail.Settlement != "" {
		phase += ", " + string(ev.Detail.Settlement)
	}
	fmt.Fprintf(v.w, "[%s] event %s: %s (%s)\n", time.Now().Format("15:04:05"), ev.Detail.EventID, ev.DetailType, phase)
}

func (v *progressView) close() {
	if v.bar != nil {
		_ = v.bar.Finish()
	}
}
