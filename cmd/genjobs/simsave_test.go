package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/clock"
)

// TestSimSavedBeforeAnswer: once a POST to a local run's simulator is
// answered, its job is in the run directory's saved state, so a run
// killed right after still has it, for each of 16 POSTs answered at once.
func TestSimSavedBeforeAnswer(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var sf simFlags
	sf.urlTTL, sf.outputs, sf.price = 15*time.Minute, 1, 10
	sim := sf.simulator(localSimKey, clock.Real{})
	saver := &simSaver{dir: dir, sim: sim}
	sim.OnChange(saver.saveOrLog(io.Discard))
	base, stop, err := sim.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			body := fmt.Sprintf(`{"model":"m","input":{"prompt":"x"},"metadata":{"operation_id":"op-%d"}}`, i)
			req, _ := http.NewRequest(http.MethodPost, base+"/api/v1/jobs", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+localSimKey)
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			var job struct{ ID string }
			if err := json.NewDecoder(resp.Body).Decode(&job); err != nil || job.ID == "" {
				t.Errorf("POST %d: %d %v", i, resp.StatusCode, err)
				return
			}
			saved, err := loadSim(dir, localSimKey)
			if err != nil {
				t.Error(err)
				return
			}
			if _, ok := saved.Job(job.ID); !ok {
				t.Errorf("job %s was answered before it was saved", job.ID)
			}
		})
	}
	wg.Wait()
}
