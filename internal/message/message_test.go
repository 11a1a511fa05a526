package message

import (
	"errors"
	"strings"
	"testing"
)

func TestDecode(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		body  string
		field string // the field the error must name; "" for a valid body
		valid bool
	}{
		{"observe", `{"action":"observe_generation","operation_id":"op-42","expected_remote_job_id":"job_01J","expected_revision":7,"attempt":3}`, "", true},
		{"submit", `{"action":"submit_generation","operation_id":"op-42","expected_revision":1,"attempt":0}`, "", true},
		{"deliver", `{"action":"deliver_artifacts","operation_id":"op-42","expected_remote_job_id":"job_01J","expected_revision":9,"attempt":1}`, "", true},
		// Genace may hand out ids with '.' and ':'; the client accepts them,
		// so the follow-up must carry them.
		{"job id with . and :", `{"action":"observe_generation","operation_id":"op-42","expected_remote_job_id":"job.01:x","expected_revision":7,"attempt":3}`, "", true},
		{"job id with a space", `{"action":"observe_generation","operation_id":"op","expected_remote_job_id":"job 01","expected_revision":1,"attempt":0}`, "expected_remote_job_id", false},
		{"unknown action", `{"action":"post_again","operation_id":"op-42","expected_revision":1,"attempt":0}`, "action", false},
		{"missing action", `{"operation_id":"op-42","expected_revision":1,"attempt":0}`, "action", false},
		{"missing operation", `{"action":"submit_generation","expected_revision":1,"attempt":0}`, "operation_id", false},
		{"missing revision", `{"action":"submit_generation","operation_id":"op","attempt":0}`, "expected_revision", false},
		{"missing attempt", `{"action":"submit_generation","operation_id":"op","expected_revision":1}`, "attempt", false},
		{"missing job id on observe", `{"action":"observe_generation","operation_id":"op","expected_revision":1,"attempt":0}`, "expected_remote_job_id", false},
		{"job id on submit", `{"action":"submit_generation","operation_id":"op","expected_remote_job_id":"j","expected_revision":1,"attempt":0}`, "expected_remote_job_id", false},
		{"empty job id", `{"action":"observe_generation","operation_id":"op","expected_remote_job_id":"","expected_revision":1,"attempt":0}`, "expected_remote_job_id", false},
		{"wrong type revision", `{"action":"submit_generation","operation_id":"op","expected_revision":"7","attempt":0}`, "expected_revision", false},
		{"wrong type attempt", `{"action":"submit_generation","operation_id":"op","expected_revision":7,"attempt":1.5}`, "attempt", false},
		{"zero revision", `{"action":"submit_generation","operation_id":"op","expected_revision":0,"attempt":0}`, "expected_revision", false},
		{"negative attempt", `{"action":"submit_generation","operation_id":"op","expected_revision":1,"attempt":-1}`, "attempt", false},
		{"url in operation id", `{"action":"submit_generation","operation_id":"https://x.example/a?sig=1","expected_revision":1,"attempt":0}`, "operation_id", false},
		{"prompt in operation id", `{"action":"submit_generation","operation_id":"a cat on a sofa","expected_revision":1,"attempt":0}`, "operation_id", false},
		{"url in job id", `{"action":"observe_generation","operation_id":"op","expected_remote_job_id":"https://x/files/1","expected_revision":1,"attempt":0}`, "expected_remote_job_id", false},
		{"unknown field (a prompt)", `{"action":"submit_generation","operation_id":"op","expected_revision":1,"attempt":0,"prompt":"a cat"}`, "", false},
		{"trailing data", `{"action":"submit_generation","operation_id":"op","expected_revision":1,"attempt":0} {}`, "", false},
		{"not json", `submit op-42 please`, "", false},
		{"empty", ``, "", false},
		{"array", `[]`, "", false},
		{"oversize", `{"action":"submit_generation","operation_id":"op","expected_revision":1,"attempt":0,"x":"` + strings.Repeat("a", MaxBodyBytes) + `"}`, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e, err := Decode([]byte(tt.body))
			if tt.valid {
				if err != nil {
					t.Fatalf("Decode: %v", err)
				}
				again, err := e.Encode()
				if err != nil {
					t.Fatalf("Encode: %v", err)
				}
				if back, err := Decode(again); err != nil || back != e {
					t.Fatalf("round trip: %+v, %v; want %+v", back, err, e)
				}
				return
			}
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("err = %v, want ErrMalformed", err)
			}
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("err %T is not a *DecodeError", err)
			}
			if tt.field != "" && de.Field != tt.field {
				t.Fatalf("error names field %q (%v), want %q", de.Field, err, tt.field)
			}
		})
	}
}

func TestEncodeRefusesInvalid(t *testing.T) {
	t.Parallel()
	if _, err := (Envelope{Action: ActionObserveGeneration, OperationID: "op", ExpectedRevision: 1}).Encode(); !errors.Is(err, ErrMalformed) {
		t.Fatalf("Encode of an observe without job id: %v", err)
	}
}

func TestNext(t *testing.T) {
	t.Parallel()
	e := Envelope{Action: ActionSubmitGeneration, OperationID: "op", ExpectedRevision: 1, Attempt: 2}
	n := e.Next(ActionObserveGeneration, 3, "job_1")
	want := Envelope{Action: ActionObserveGeneration, OperationID: "op", ExpectedRevision: 3, ExpectedRemoteJobID: "job_1", Attempt: 3}
	if n != want {
		t.Fatalf("Next = %+v, want %+v", n, want)
	}
}

// FuzzDecode checks that no input panics, that whatever decodes also
// validates and round-trips, and that nothing decoded can carry a URL or
// free text.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"action":"observe_generation","operation_id":"op-42","expected_remote_job_id":"job_01J","expected_revision":7,"attempt":3}`,
		`{"action":"submit_generation","operation_id":"op-42","expected_revision":1,"attempt":0}`,
		`{"action":"deliver_artifacts","operation_id":"a:b.c","expected_remote_job_id":"j","expected_revision":1,"attempt":1000000}`,
		`{"action":1}`, `null`, `{}`, `{"action":"submit_generation","operation_id":"op","expected_revision":1e3,"attempt":0}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		e, err := Decode(body)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if err := e.Validate(); err != nil {
			t.Fatalf("decoded envelope does not validate: %v", err)
		}
		for _, s := range []string{e.OperationID, e.ExpectedRemoteJobID} {
			if strings.ContainsAny(s, "/ ?&=%") {
				t.Fatalf("identifier %q can carry a URL or text", s)
			}
		}
		out, err := e.Encode()
		if err != nil {
			t.Fatalf("Encode: %v", err)
		}
		if back, err := Decode(out); err != nil || back != e {
			t.Fatalf("round trip: %+v %v", back, err)
		}
	})
}
