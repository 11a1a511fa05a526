package faultsim_test

import (
	"strings"
	"testing"
	"time"

	"github.com/genjobs/genjobs/internal/artifact"
	"github.com/genjobs/genjobs/internal/faultsim"
	"github.com/genjobs/genjobs/internal/genacesim"
	"github.com/genjobs/genjobs/internal/operation"
)

func st(rev int64, phase operation.Phase, job string) faultsim.State {
	return faultsim.State{Revision: rev, Phase: phase, RemoteJobID: job}
}

func TestCheckWrite(t *testing.T) {
	settled := st(5, operation.Failed, "job_1")
	settled.Settlement = operation.SettlementSettled
	cases := []struct {
		name     string
		expected int64
		old      *faultsim.State
		next     faultsim.State
		want     string // substring of the one problem; "" for none
	}{
		{"create", 0, nil, st(1, operation.Prepared, ""), ""},
		{"create at r2", 0, nil, st(2, operation.Prepared, ""), "created at revision 2"},
		{"claim", 1, ptr(st(1, operation.Prepared, "")), st(2, operation.Submitting, ""), ""},
		{"accept", 2, ptr(st(2, operation.Submitting, "")), st(3, operation.Accepted, "job_1"), ""},
		{"self-write", 3, ptr(st(3, operation.Submitting, "")), st(4, operation.Submitting, ""), ""},
		{"late evidence after uncertain", 3, ptr(st(3, operation.Uncertain, "")), st(4, operation.Accepted, "job_1"), ""},
		{"stale overwrite", 2, ptr(st(3, operation.Accepted, "job_1")), st(4, operation.Accepted, "job_1"), "stale overwrite: the writer expected r2 but the store held r3"},
		{"revision jump", 3, ptr(st(3, operation.Accepted, "job_1")), st(5, operation.Accepted, "job_1"), "not by one"},
		{"terminal written", 5, ptr(settled), st(6, operation.Failed, "job_1"), "terminal record"},
		{"delivered written", 7, ptr(st(7, operation.Delivered, "job_1")), st(8, operation.Succeeded, "job_1"), "terminal record"},
		{"illegal transition", 4, ptr(st(4, operation.Accepted, "job_1")), st(5, operation.Prepared, "job_1"), "illegal transition accepted → prepared"},
		{"job id replaced", 4, ptr(st(4, operation.Accepted, "job_1")), st(5, operation.Accepted, "job_2"), "job id job_1 replaced by \"job_2\""},
		{"job id dropped", 4, ptr(st(4, operation.Accepted, "job_1")), st(5, operation.Accepted, ""), "job id job_1 replaced by \"\""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := faultsim.CheckWrite(tc.expected, tc.old, tc.next)
			switch {
			case tc.want == "" && len(got) > 0:
				t.Fatalf("legal write flagged: %v", got)
			case tc.want != "" && (len(got) != 1 || !strings.Contains(got[0], tc.want)):
				t.Fatalf("got %q, want one problem containing %q", got, tc.want)
			}
		})
	}
}

func ptr(s faultsim.State) *faultsim.State { return &s }

const (
	sumA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	sumB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

// delivered is a clean final state: one job, one output, stored once.
func delivered() faultsim.Final {
	key := artifact.Key("op-1", "job_1", 0, "image/png")
	return faultsim.Final{
		Record: operation.Record{OperationID: "op-1", Revision: 9, Phase: operation.Delivered, RemoteJobID: "job_1",
			Deliveries: []operation.Delivery{{Index: 0, Key: key, SizeBytes: 100, SHA256: sumA}}},
		Jobs:     []genacesim.JobTruth{{ID: "job_1", OperationID: "op-1", State: genacesim.StateSucceeded, Credits: genacesim.Credits{Reserved: 10, Charged: 10}}},
		Posts:    1,
		Returned: []string{"job_1"},
		Outputs:  []faultsim.Output{{ContentType: "image/png", SizeBytes: 100, SHA256: sumA}},
		Stored:   map[string]string{key: sumA},
		Created:  map[string]int{key: 1},
	}
}

func failedWith(refund string, charged int64, settlement operation.Settlement) faultsim.Final {
	return faultsim.Final{
		Record: operation.Record{OperationID: "op-1", Revision: 6, Phase: operation.Failed, RemoteJobID: "job_1", Settlement: settlement},
		Jobs: []genacesim.JobTruth{{ID: "job_1", OperationID: "op-1", State: genacesim.StateFailed,
			Credits: genacesim.Credits{Reserved: 10, Charged: charged, RefundState: refund}}},
		Posts: 1, Returned: []string{"job_1"},
	}
}

func TestCheckFinal(t *testing.T) {
	key := artifact.Key("op-1", "job_1", 0, "image/png")
	parked := &operation.ParkedState{Reason: "test", At: time.Unix(0, 0)}
	cases := []struct {
		name string
		f    func() faultsim.Final
		want []faultsim.Invariant
	}{
		{"clean delivery", delivered, nil},
		{"two jobs", func() faultsim.Final {
			f := delivered()
			f.Jobs = append(f.Jobs, genacesim.JobTruth{ID: "job_2", OperationID: "op-1", State: genacesim.StateRunning})
			f.Posts = 2
			return f
		}, []faultsim.Invariant{faultsim.InvPosts, faultsim.InvPosts, faultsim.InvJobID}},
		{"two jobs on an operator's decision", func() faultsim.Final {
			f := delivered()
			f.Jobs = append(f.Jobs, genacesim.JobTruth{ID: "job_0", OperationID: "op-1", State: genacesim.StateFailed})
			f.Posts, f.Audit = 2, 1
			f.ReviewJobIDs = []string{"job_0"}
			return f
		}, nil},
		{"retried after 429s", func() faultsim.Final { f := delivered(); f.Posts, f.RateLimited = 3, 2; return f }, nil},
		{"second POST without a 429", func() faultsim.Final { f := delivered(); f.Posts, f.RateLimited = 3, 1; return f }, []faultsim.Invariant{faultsim.InvPosts}},
		{"returned job id lost", func() faultsim.Final {
			f := delivered()
			f.Returned = append(f.Returned, "job_9")
			return f
		}, []faultsim.Invariant{faultsim.InvJobID}},
		{"returned job id kept in a review", func() faultsim.Final {
			f := failedWith(genacesim.RefundSettled, 10, operation.SettlementSettled)
			f.Returned = []string{"job_1", "job_9"}
			f.ReviewJobIDs = []string{"job_9"}
			return f
		}, nil},
		{"unreported job, operation uncertain", func() faultsim.Final {
			return faultsim.Final{Record: operation.Record{OperationID: "op-1", Revision: 3, Phase: operation.Uncertain, Parked: parked},
				Jobs: []genacesim.JobTruth{{ID: "job_1", State: genacesim.StateSucceeded}}, Posts: 1}
		}, nil},
		{"unreported job, operation rejected", func() faultsim.Final {
			return faultsim.Final{Record: operation.Record{OperationID: "op-1", Revision: 3, Phase: operation.Rejected},
				Jobs: []genacesim.JobTruth{{ID: "job_1", State: genacesim.StateSucceeded}}, Posts: 1}
		}, []faultsim.Invariant{faultsim.InvJobID}},
		{"stuck accepted", func() faultsim.Final {
			f := delivered()
			f.Record.Phase, f.Record.Deliveries = operation.Accepted, nil
			return f
		}, []faultsim.Invariant{faultsim.InvSettled}},
		{"stuck prepared", func() faultsim.Final {
			return faultsim.Final{Record: operation.Record{OperationID: "op-1", Revision: 2, Phase: operation.Prepared}}
		}, []faultsim.Invariant{faultsim.InvSettled}},
		{"stalled waits for review", func() faultsim.Final {
			f := delivered()
			f.Record.Phase, f.Record.Deliveries, f.Record.Parked = operation.Stalled, nil, parked
			return f
		}, nil},
		{"wrong checksum recorded", func() faultsim.Final { f := delivered(); f.Record.Deliveries[0].SHA256 = sumB; return f }, []faultsim.Invariant{faultsim.InvDelivery}},
		{"wrong content stored", func() faultsim.Final { f := delivered(); f.Stored[key] = sumB; return f }, []faultsim.Invariant{faultsim.InvDelivery}},
		{"nothing stored", func() faultsim.Final { f := delivered(); delete(f.Stored, key); return f }, []faultsim.Invariant{faultsim.InvDelivery}},
		{"stored twice", func() faultsim.Final { f := delivered(); f.Created[key] = 2; return f }, []faultsim.Invariant{faultsim.InvDelivery}},
		{"output missing", func() faultsim.Final {
			f := delivered()
			f.Outputs = append(f.Outputs, faultsim.Output{ContentType: "image/png", SizeBytes: 5, SHA256: sumB})
			return f
		}, []faultsim.Invariant{faultsim.InvDelivery, faultsim.InvDelivery}},
		{"succeeded render ended failed", func() faultsim.Final {
			f := failedWith(genacesim.RefundSettled, 10, operation.SettlementSettled)
			f.Jobs[0].State = genacesim.StateSucceeded
			return f
		}, []faultsim.Invariant{faultsim.InvDelivery}},
		{"settled on Genace's word", func() faultsim.Final { return failedWith(genacesim.RefundSettled, 10, operation.SettlementSettled) }, nil},
		{"settled with nothing charged", func() faultsim.Final { return failedWith(genacesim.RefundNone, 0, operation.SettlementSettled) }, nil},
		{"settled although reconciled without refund", func() faultsim.Final {
			return failedWith(genacesim.RefundNone, 10, operation.SettlementSettled)
		}, []faultsim.Invariant{faultsim.InvRefund}},
		{"unsettled without review", func() faultsim.Final {
			return failedWith(genacesim.RefundPending, 10, operation.SettlementUnresolved)
		}, []faultsim.Invariant{faultsim.InvSettled}},
		{"unsettled in review", func() faultsim.Final {
			f := failedWith(genacesim.RefundNone, 10, operation.SettlementUnresolved)
			f.Record.Parked = parked
			return f
		}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got []faultsim.Invariant
			vs := faultsim.CheckFinal(tc.f())
			for _, v := range vs {
				got = append(got, v.Invariant)
			}
			if strings.Join(invs(got), ",") != strings.Join(invs(tc.want), ",") {
				t.Fatalf("got %v, want %v", vs, tc.want)
			}
		})
	}
}

func invs(in []faultsim.Invariant) []string {
	out := make([]string, len(in))
	for i, v := range in {
		out[i] = string(v)
	}
	return out
}
