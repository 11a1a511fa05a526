package genacesim

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestDriftAndChosenJobID(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{})
	// A POST creates its job under the scripted id, and a GET finds it.
	h.sim.ScriptPOST("op-id", NoFault().WithJobID("job.01:x"))
	if r := h.post(t, "op-id", "m"); r.status != 202 || r.job(t).ID != "job.01:x" {
		t.Fatalf("POST: %d %q", r.status, r.body)
	}
	if ids := h.sim.JobsForOperation("op-id"); len(ids) != 1 || ids[0] != "job.01:x" {
		t.Fatalf("jobs %v", ids)
	}
	// A GET answered with a drifted body still names the job.
	h.sim.ScriptGET("job.01:x", Drifted(DriftUnknownState))
	r := h.do(t, "GET", "/api/v1/jobs/job.01:x", key, "")
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil || r.status != 200 || m["state"] != "paused" || m["id"] != "job.01:x" {
		t.Fatalf("GET: %d %q", r.status, r.body)
	}
	// Each drift bends a 202 and keeps the id readable.
	for _, d := range BodyDrifts {
		op := "op-" + string(d)
		h.sim.ScriptPOST(op, Drifted(d))
		r := h.post(t, op, "m")
		id := h.sim.JobsForOperation(op)[0]
		wantJSON := d != DriftTrailingJunk && d != DriftTruncated
		if r.status != 202 || !strings.Contains(string(r.body), `"id":"`+id+`"`) || json.Valid(r.body) != wantJSON {
			t.Errorf("%s: %d %q", d, r.status, r.body)
		}
	}
	// A scripted id already taken is never reused.
	h.sim.ScriptPOST("op-again", NoFault().WithJobID("job.01:x"))
	h.post(t, "op-again", "m")
	if ids := h.sim.JobsForOperation("op-again"); len(ids) != 1 || ids[0] == "job.01:x" {
		t.Fatalf("second job under a taken id: %v", ids)
	}
}
