package genace

import (
	"bytes"
	"encoding/json"
	"testing"
)

const validJobJSON = `{
  "id": "job_01J",
  "model": "flux-pro-2",
  "state": "succeeded",
  "submission_failure": false,
  "created_at": "2026-11-29T08:00:00Z",
  "updated_at": "2026-11-29T08:00:40Z",
  "started_at": "2026-11-29T08:00:05Z",
  "finished_at": "2026-11-29T08:00:40Z",
  "progress": 1,
  "outputs": [{"url": "http://h/files/job_01J/0?expires=1&sig=ab", "content_type": "image/png", "size_bytes": 10, "sha256": "00"}],
  "error": null,
  "credits": {"reserved": 12, "charged": 12, "refunded": 0, "refund_state": "none"},
  "metadata": {"operation_id": "op-42"}
}`

// FuzzDecodeJob checks the decoder never panics and that anything it
// accepts satisfies the guarantees the rest of the code relies on.
func FuzzDecodeJob(f *testing.F) {
	f.Add([]byte(validJobJSON))
	f.Add([]byte(`{"id":"j","state":"queued","credits":{"refund_state":"none"}}`))
	f.Add([]byte(`{"id":"j","state":"paused","credits":{"refund_state":"none"}}`))
	f.Add([]byte(`{"id":"j","state":"failed","credits":{"refund_state":"maybe"}}`))
	f.Add([]byte(`{"id":"","state":"queued","credits":{"refund_state":"none"}}`))
	f.Add([]byte(`{"id":"j","state":"queued","credits":{"refund_state":"none"}} trailing`))
	f.Add([]byte(`{"id":"j","state":"queued","credits":{"reserved":-1,"refund_state":"none"}}`))
	f.Add([]byte(`{"id":"j","state":"succeeded","outputs":[{"url":"/relative"}],"credits":{"refund_state":"none"}}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`[]`))
	f.Add([]byte("{\"id\": \"job_\x00\xff<html>"))
	f.Fuzz(func(t *testing.T, data []byte) {
		j, err := decodeJob(data)
		if err != nil {
			if j != nil {
				t.Fatal("job returned with error")
			}
			return
		}
		if !validID(j.ID) || !j.State.Valid() || !j.Credits.RefundState.Valid() {
			t.Fatalf("accepted invalid job: %+v", j)
		}
		if j.Credits.Reserved < 0 || j.Credits.Charged < 0 || j.Credits.Refunded < 0 {
			t.Fatalf("negative credits: %+v", j.Credits)
		}
		if j.Progress < 0 || j.Progress > 1 {
			t.Fatalf("progress %v", j.Progress)
		}
		for _, o := range j.Outputs {
			if validOutputURL(o.URL.Reveal()) != nil || o.SizeBytes < 0 {
				t.Fatalf("bad output accepted")
			}
		}
		// Marshalling a decoded job must never reveal its URLs.
		b, err := json.Marshal(j)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range j.Outputs {
			if u := o.URL.Reveal(); len(u) > len(redactedURL) && bytes.Contains(b, []byte(u)) {
				t.Fatal("json.Marshal revealed a signed URL")
			}
		}
	})
}

func TestDecodeJobValid(t *testing.T) {
	j, err := decodeJob([]byte(validJobJSON))
	if err != nil {
		t.Fatal(err)
	}
	if j.ID != "job_01J" || j.State != RemoteSucceeded || len(j.Outputs) != 1 || j.Credits.Charged != 12 ||
		j.Metadata["operation_id"] != "op-42" || j.StartedAt == nil || j.Outputs[0].SizeBytes != 10 {
		t.Fatalf("%+v", j)
	}
}

// FuzzNamedIn checks the id-first read against the full decoder: whatever
// decodeJob accepts, namedIn names the same job or reports conflicting
// ids; whatever namedIn hands back as an id is a valid one; evidence
// stays bounded.
func FuzzNamedIn(f *testing.F) {
	f.Add([]byte(validJobJSON))
	f.Add([]byte(`{"id":"a","id":"b"}`))
	f.Add([]byte(`{"id":"job_1","state":7}`))
	f.Add([]byte(`{"state":"queued","id":"job.1:x"`))
	f.Add([]byte(`{"error":{"code":5,"job_id":"job_1"}} junk`))
	f.Add([]byte(`{"id":{"x":[1,{"id":"y"}]},"error":{"job_id":"z/1"}}`))
	f.Add([]byte(`{"id":"https://h/f?sig=abc"}`))
	f.Add([]byte(`{"ID":"job_1","state":"queued","credits":{"refund_state":"none"}}`))
	f.Add([]byte(`{"id":"job_1","Id":"job_2","state":"queued","credits":{"refund_state":"none"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, path := range [][]string{{"id"}, {"error", "job_id"}} {
			n := namedIn(data, path...)
			if n.id != "" && (!validID(n.id) || n.evidence != "") {
				t.Fatalf("named %+v", n)
			}
			if len(n.evidence) > maxEvidence+len("...") {
				t.Fatalf("evidence of %d bytes", len(n.evidence))
			}
		}
		if j, err := decodeJob(data); err == nil {
			if n := namedIn(data, "id"); n.id != j.ID && n.evidence == "" {
				t.Fatalf("decodeJob read job %q, namedIn %+v", j.ID, n)
			}
		}
	})
}
