package deliver_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/genjobs/genjobs/internal/artifact"
	"github.com/genjobs/genjobs/internal/artifact/artifacttest"
	"github.com/genjobs/genjobs/internal/clock"
	"github.com/genjobs/genjobs/internal/deliver"
	"github.com/genjobs/genjobs/internal/dev/genacesim"
	"github.com/genjobs/genjobs/internal/dev/handlertest"
	"github.com/genjobs/genjobs/internal/dev/localpack"
	"github.com/genjobs/genjobs/internal/genace"
	"github.com/genjobs/genjobs/internal/message"
	"github.com/genjobs/genjobs/internal/metrics"
	"github.com/genjobs/genjobs/internal/observe"
	"github.com/genjobs/genjobs/internal/operation"
	"github.com/genjobs/genjobs/internal/review"
	"github.com/genjobs/genjobs/internal/schedule"
	"github.com/genjobs/genjobs/internal/store"
	"github.com/genjobs/genjobs/internal/submit"
)

// The production stores satisfy the handler's interfaces.
var (
	_ deliver.Artifacts = (*artifact.S3)(nil)
	_ deliver.Artifacts = (*localpack.Dir)(nil)
	_ deliver.Genace    = (*genace.Client)(nil)
	_ deliver.Store     = (store.Store)(nil)
)

// gen wraps the Genace client: it counts the handler's GETs, can hold a
// GET until released, and runs a hook before the next download (to move
// the clock past a signed URL's expiry between GET and download).
type gen struct {
	inner          *genace.Client
	mu             sync.Mutex
	gets           int
	entered        chan struct{}
	release        chan struct{}
	beforeDownload []func()
}

func (g *gen) Get(ctx context.Context, jobID string, wait, timeout time.Duration) (*genace.Job, error) {
	g.mu.Lock()
	g.gets++
	entered, release := g.entered, g.release
	g.entered, g.release = nil, nil
	g.mu.Unlock()
	job, err := g.inner.Get(ctx, jobID, wait, timeout)
	if entered != nil {
		close(entered)
		<-release
	}
	return job, err
}

func (g *gen) Download(ctx context.Context, u genace.SignedURL, timeout time.Duration) (io.ReadCloser, int64, error) {
	g.mu.Lock()
	var hook func()
	if len(g.beforeDownload) > 0 {
		hook, g.beforeDownload = g.beforeDownload[0], g.beforeDownload[1:]
	}
	g.mu.Unlock()
	if hook != nil {
		hook()
	}
	return g.inner.Download(ctx, u, timeout)
}

// noWait answers observation's long polls at once: the simulator holds a
// long poll on the manual clock, which no one advances meanwhile.
type noWait struct{ c *genace.Client }

func (n noWait) Get(ctx context.Context, jobID string, _, _ time.Duration) (*genace.Job, error) {
	return n.c.Get(ctx, jobID, 0, 5*time.Second)
}

func (g *gen) hold() (entered, release chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.entered, g.release = make(chan struct{}), make(chan struct{})
	return g.entered, g.release
}

func (g *gen) Gets() int { g.mu.Lock(); defer g.mu.Unlock(); return g.gets }

// counting wraps the artifact store: it counts Stat and Put per key and
// can fail a Put part-way through its stream, as an S3 outage mid-upload
// would.
type counting struct {
	inner deliver.Artifacts
	mu    sync.Mutex
	stats map[string]int
	puts  map[string]int
	fail  map[string]int // key → Puts still to fail
}

var errStoreDown = errors.New("artifact store: injected outage mid-upload")

func (c *counting) Stat(ctx context.Context, key string) (artifact.Object, bool, error) {
	c.mu.Lock()
	c.stats[key]++
	c.mu.Unlock()
	return c.inner.Stat(ctx, key)
}

func (c *counting) Put(ctx context.Context, key string, r io.Reader, size int64, sum, contentType string) (artifact.Object, error) {
	c.mu.Lock()
	c.puts[key]++
	fail := c.fail[key] != 0
	if c.fail[key] > 0 {
		c.fail[key]--
	}
	c.mu.Unlock()
	if fail {
		_, _ = io.CopyN(io.Discard, r, 16) // some of the stream went out
		return artifact.Object{}, errStoreDown
	}
	return c.inner.Put(ctx, key, r, size, sum, contentType)
}

func (c *counting) failPuts(key string, n int) { c.mu.Lock(); c.fail[key] = n; c.mu.Unlock() }
func (c *counting) Puts(key string) int        { c.mu.Lock(); defer c.mu.Unlock(); return c.puts[key] }
func (c *counting) Stats(key string) int       { c.mu.Lock(); defer c.mu.Unlock(); return c.stats[key] }

// flaky wraps the operation store and fails chosen record writes with a
// transient error, as a crash or a DynamoDB outage between the copy and
// its record would.
type flaky struct {
	store.Store
	mu         sync.Mutex
	updates    int
	failAt     map[int]bool
	failReview int // review writes still to fail
}

func (f *flaky) PutReview(ctx context.Context, r review.Record) (bool, error) {
	f.mu.Lock()
	fail := f.failReview > 0
	if fail {
		f.failReview--
	}
	f.mu.Unlock()
	if fail {
		return false, errors.New("store: injected review write failure")
	}
	return f.Store.PutReview(ctx, r)
}

func (f *flaky) Update(ctx context.Context, rec operation.Record, expected int64) (operation.Record, error) {
	f.mu.Lock()
	f.updates++
	fail := f.failAt[f.updates]
	f.mu.Unlock()
	if fail {
		return operation.Record{}, errors.New("store: injected write failure")
	}
	return f.Store.Update(ctx, rec, expected)
}

// failUpdate makes the n-th record write from now fail (1 = the next).
func (f *flaky) failUpdate(n int) { f.mu.Lock(); f.failAt[f.updates+n] = true; f.mu.Unlock() }

type env struct {
	clk   *clock.Manual
	sim   *genacesim.Simulator
	gen   *gen
	store store.Store
	st    *flaky
	out   *handlertest.Outbox
	ext   *handlertest.Extender
	logs  *handlertest.Buffer
	mets  *handlertest.Buffer
	dir   *localpack.Dir
	s3    *s3.Client
	// bucket is s3's bucket, one of the test's own in moto's S3.
	bucket string
	art    *counting
	del    *deliver.Handler
	obs    *observe.Handler
	sub    *submit.Handler
}

type options struct {
	outputs int
	s3      bool
	cfg     deliver.Config
}

func testPolicies() schedule.Policies {
	ps := schedule.DefaultPolicies()
	ps.Default = schedule.Policy{LongPoll: 20 * time.Second, Immediate: 0, Base: 5 * time.Second, Cap: time.Minute, Multiplier: 2, Jitter: 0}
	return ps
}

func newEnv(t testing.TB, kind string, o options) *env {
	t.Helper()
	if o.outputs == 0 {
		o.outputs = 2
	}
	e := &env{clk: clock.NewManual(handlertest.Start), out: &handlertest.Outbox{}, ext: &handlertest.Extender{}, logs: &handlertest.Buffer{}, mets: &handlertest.Buffer{}}
	simCfg := genacesim.Config{DefaultModel: genacesim.ModelConfig{Price: 10, QueueFor: 2 * time.Second, RunFor: 10 * time.Second, OutputCount: o.outputs}}
	var client *genace.Client
	e.sim, client = handlertest.Sim(t, e.clk, simCfg)
	e.gen = &gen{inner: client}
	e.store = handlertest.OpenStore(t, kind)
	e.st = &flaky{Store: e.store, failAt: map[int]bool{}}
	var inner deliver.Artifacts
	if o.s3 {
		e.s3, e.bucket = artifacttest.S3(t)
		inner = artifact.NewS3(e.s3, e.bucket)
	} else {
		d, err := localpack.New(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		e.dir, inner = d, d
	}
	e.art = &counting{inner: inner, stats: map[string]int{}, puts: map[string]int{}, fail: map[string]int{}}
	log := slog.New(slog.NewJSONHandler(e.logs, nil))
	delays := schedule.NewObservation(testPolicies())
	delays.Rand = func() float64 { return 0.5 }
	e.sub = submit.New(submit.Deps{Store: e.store, Genace: client, Extender: e.ext, Sender: e.out, Clock: e.clk, Log: log, Metrics: metrics.Discard()}, submit.Config{})
	e.obs = observe.New(observe.Deps{Store: e.store, Genace: noWait{client}, Delays: delays, Extender: e.ext, Sender: e.out, Clock: e.clk, Log: log, Metrics: metrics.Discard()}, observe.Config{})
	e.del = deliver.New(deliver.Deps{Store: e.st, Genace: e.gen, Artifacts: e.art, Extender: e.ext, Sender: e.out, Clock: e.clk, Log: log, Metrics: metrics.New(e.mets, "deliver", e.clk)}, o.cfg)
	return e
}

// succeed runs the real submit and observe handlers against the simulator
// until observation hands the operation to delivery; it returns that
// deliver_artifacts message.
func (e *env) succeed(t *testing.T, id string) handlertest.Sent {
	t.Helper()
	rec := handlertest.Create(t, e.store, handlertest.Prepared(id))
	if resp, err := e.sub.Handle(context.Background(), handlertest.Event(t, e.clk.Now(), handlertest.Dispatch(rec))); err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("submit: %v %v", resp, err)
	}
	sent := e.out.Take()
	for steps := 0; steps < 50; steps++ {
		if len(sent) != 1 {
			t.Fatalf("expected one follow-up, got %+v", sent)
		}
		next := sent[0]
		if next.Env.Action == message.ActionDeliverArtifacts {
			if got := handlertest.Get(t, e.store, id); got.Phase != operation.PhaseSucceeded {
				t.Fatalf("handed to delivery in phase %s", got.Phase)
			}
			return next
		}
		e.clk.Advance(next.Delay)
		if resp, _ := e.obs.Handle(context.Background(), handlertest.Event(t, e.clk.Now(), next)); len(resp.BatchItemFailures) != 0 {
			t.Fatalf("observation failed\n%s", e.logs.String())
		}
		sent = e.out.Take()
	}
	t.Fatal("never succeeded")
	return handlertest.Sent{}
}

func (e *env) deliver(t *testing.T, msgs ...handlertest.Sent) []string {
	t.Helper()
	resp, err := e.del.Handle(context.Background(), handlertest.Event(t, e.clk.Now(), msgs...))
	if err != nil {
		t.Fatal(err)
	}
	return handlertest.Failed(resp)
}

func keyOf(rec operation.Record, i int) string {
	return artifact.Key(rec.OperationID, rec.RemoteJobID, i, rec.Remote.Outputs[i].ContentType)
}

// stored reads an artifact back from the Dir (or S3) store and returns
// its bytes' sha256.
func (e *env) stored(t *testing.T, key string) string {
	t.Helper()
	var data []byte
	if e.dir != nil {
		r, err := e.dir.Open(key)
		if err != nil {
			t.Fatal(err)
		}
		if data, err = io.ReadAll(r); err != nil {
			t.Fatal(err)
		}
	} else {
		out, err := e.s3.GetObject(context.Background(), &s3.GetObjectInput{Bucket: aws.String(e.bucket), Key: aws.String(key)})
		if err != nil {
			t.Fatal(err)
		}
		defer out.Body.Close()
		if data, err = io.ReadAll(out.Body); err != nil {
			t.Fatal(err)
		}
		if out.Metadata[artifact.MetaSHA256] == "" {
			t.Fatalf("%s stored without its sha256 metadata", key)
		}
	}
	h := sha256.Sum256(data)
	return hex.EncodeToString(h[:])
}

// checkDelivered asserts a delivered record whose every output is stored
// under its deterministic key with the sha256 Genace reported.
func (e *env) checkDelivered(t *testing.T, id string) operation.Record {
	t.Helper()
	got := handlertest.Get(t, e.store, id)
	if got.Phase != operation.PhaseDelivered || got.Schedule != nil || !got.Terminal() {
		t.Fatalf("phase %s, schedule %+v; want delivered\n%s", got.Phase, got.Schedule, e.logs.String())
	}
	if len(got.Deliveries) != len(got.Remote.Outputs) {
		t.Fatalf("%d deliveries for %d outputs", len(got.Deliveries), len(got.Remote.Outputs))
	}
	for i, desc := range got.Remote.Outputs {
		d, ok := got.Delivered(i)
		if !ok || d.Key != keyOf(got, i) || d.SHA256 != desc.SHA256 || d.SizeBytes != desc.SizeBytes {
			t.Fatalf("output %d: delivery %+v, descriptor %+v", i, d, desc)
		}
		if sum := e.stored(t, d.Key); sum != desc.SHA256 {
			t.Fatalf("output %d: stored sha256 %s, Genace reported %s", i, sum, desc.SHA256)
		}
	}
	return got
}

func (e *env) count(metric, outcome string) int {
	n := 0
	for _, line := range strings.Split(e.mets.String(), "\n") {
		if strings.Contains(line, `"`+metric+`"`) && strings.Contains(line, `"Outcome":"`+outcome+`"`) {
			n++
		}
	}
	return n
}

func forEachStore(t *testing.T, f func(t *testing.T, kind string)) {
	for _, kind := range handlertest.StoreKinds() {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			f(t, kind)
		})
	}
}

func TestDeliversSucceededOperation(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		e := newEnv(t, kind, options{})
		m := e.succeed(t, "op-ok")
		before := handlertest.Get(t, e.store, "op-ok")
		if failed := e.deliver(t, m); len(failed) != 0 {
			t.Fatalf("failures %v\n%s", failed, e.logs.String())
		}
		got := e.checkDelivered(t, "op-ok")
		if n := e.sim.FileGets(); n != 2 {
			t.Fatalf("%d signed-URL downloads for 2 outputs", n)
		}
		// One conditional write per output, the last one completing.
		if got.Revision != before.Revision+2 || got.LastAppliedMessageID != m.ID {
			t.Fatalf("revision %d → %d, last applied %q", before.Revision, got.Revision, got.LastAppliedMessageID)
		}
		if e.out.Len() != 0 || e.sim.TotalPosts() != 1 {
			t.Fatalf("%d follow-ups, %d POSTs", e.out.Len(), e.sim.TotalPosts())
		}
		if e.count(metrics.Deliveries, "copied") != 2 || e.count(metrics.ActionDuration, "delivered") != 1 {
			t.Fatalf("metrics:\n%s", e.mets.String())
		}
	})
}

// The replay the seed asks for: the artifact store fails after the first
// of two outputs. The failure is recorded (no receive count burnt) with a
// retry; the retry reuses output 0 as stored: no second download, no
// second upload, the stored file untouched.
func TestReplayAfterStoreFailureReusesStoredOutput(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		e := newEnv(t, kind, options{})
		m := e.succeed(t, "op-replay")
		rec := handlertest.Get(t, e.store, "op-replay")
		k0, k1 := keyOf(rec, 0), keyOf(rec, 1)
		e.art.failPuts(k1, 1)
		if failed := e.deliver(t, m); len(failed) != 0 {
			t.Fatalf("a store outage failed the message (%v); it must be recorded and retried", failed)
		}
		mid := handlertest.Get(t, e.store, "op-replay")
		if mid.Phase != operation.PhaseSucceeded || len(mid.Deliveries) != 1 || mid.Deliveries[0].Index != 0 ||
			mid.Counters.ReadFailures != 1 || mid.LastError != "artifact_copy_failed" {
			t.Fatalf("after the outage: phase %s, deliveries %+v, failures %d, last error %q",
				mid.Phase, mid.Deliveries, mid.Counters.ReadFailures, mid.LastError)
		}
		retry := e.out.Take()
		if len(retry) != 1 || retry[0].Env.Action != message.ActionDeliverArtifacts || retry[0].Env.ExpectedRevision != mid.Revision || retry[0].Delay <= 0 {
			t.Fatalf("retry %+v, want one delayed deliver_artifacts at r%d", retry, mid.Revision)
		}
		gets := e.sim.FileGets() // output 0 copied, output 1 started
		sum0 := e.stored(t, k0)

		e.clk.Advance(retry[0].Delay)
		if failed := e.deliver(t, retry[0]); len(failed) != 0 {
			t.Fatalf("retry failed: %v\n%s", failed, e.logs.String())
		}
		got := e.checkDelivered(t, "op-replay")
		if n := e.sim.FileGets() - gets; n != 1 {
			t.Fatalf("the retry downloaded %d outputs, want 1 (output 1 only)", n)
		}
		if e.art.Puts(k0) != 1 || e.art.Stats(k0) != 1 || e.art.Puts(k1) != 2 {
			t.Fatalf("output 0: %d puts, %d stats; output 1: %d puts", e.art.Puts(k0), e.art.Stats(k0), e.art.Puts(k1))
		}
		if e.stored(t, k0) != sum0 {
			t.Fatal("output 0 changed")
		}
		if d0, _ := got.Delivered(0); d0 != mid.Deliveries[0] {
			t.Fatalf("output 0's delivery changed: %+v → %+v", mid.Deliveries[0], d0)
		}
		if got.Counters.ReadFailures != 0 {
			t.Fatalf("failures %d after success", got.Counters.ReadFailures)
		}
	})
}

// A copy that reached the store but whose record write never landed (a
// crash, a table outage) is found by Stat on the redelivery and recorded
// without downloading or uploading it again.
func TestStoredButUnrecordedOutputIsReused(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		e := newEnv(t, kind, options{})
		m := e.succeed(t, "op-unrec")
		rec := handlertest.Get(t, e.store, "op-unrec")
		k0 := keyOf(rec, 0)
		e.st.failUpdate(1)
		if failed := e.deliver(t, m); len(failed) != 1 {
			t.Fatalf("a failed record write must fail the message so SQS redelivers it; failures %v", failed)
		}
		if got := handlertest.Get(t, e.store, "op-unrec"); got.Revision != rec.Revision || len(got.Deliveries) != 0 {
			t.Fatalf("r%d → r%d, deliveries %+v", rec.Revision, got.Revision, got.Deliveries)
		}
		if e.sim.FileGets() != 1 || e.art.Puts(k0) != 1 {
			t.Fatalf("%d downloads, %d puts of output 0", e.sim.FileGets(), e.art.Puts(k0))
		}
		if failed := e.deliver(t, m); len(failed) != 0 { // SQS redelivers the same message
			t.Fatalf("redelivery failed: %v\n%s", failed, e.logs.String())
		}
		e.checkDelivered(t, "op-unrec")
		if e.sim.FileGets() != 2 || e.art.Puts(k0) != 1 {
			t.Fatalf("after redelivery: %d downloads (want 2: output 0 once, output 1 once), %d puts of output 0", e.sim.FileGets(), e.art.Puts(k0))
		}
		if e.count(metrics.Deliveries, "reused") != 1 || e.count(metrics.Deliveries, "copied") != 1 {
			t.Fatalf("metrics:\n%s", e.mets.String())
		}
	})
}

// One message moves the revision once per output. When it is redelivered
// mid-way it recognises those writes as its own and continues; another
// message at the original revision is stale.
func TestRedeliveredMessageContinuesFromItsOwnProgress(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		e := newEnv(t, kind, options{})
		m := e.succeed(t, "op-cont")
		rec := handlertest.Get(t, e.store, "op-cont")
		e.st.failUpdate(2) // output 0 is recorded, output 1 stored but its write fails
		if failed := e.deliver(t, m); len(failed) != 1 {
			t.Fatalf("failures %v", failed)
		}
		mid := handlertest.Get(t, e.store, "op-cont")
		if mid.Revision != rec.Revision+1 || len(mid.Deliveries) != 1 || mid.LastAppliedMessageID != m.ID {
			t.Fatalf("r%d, deliveries %+v, last applied %q", mid.Revision, mid.Deliveries, mid.LastAppliedMessageID)
		}
		other := m
		other.ID = "another-message"
		gets := e.gen.Gets()
		if failed := e.deliver(t, other); len(failed) != 0 {
			t.Fatalf("failures %v", failed)
		}
		if e.gen.Gets() != gets || handlertest.Get(t, e.store, "op-cont").Revision != mid.Revision {
			t.Fatal("a message at an old revision read the job or wrote")
		}
		if failed := e.deliver(t, m); len(failed) != 0 {
			t.Fatalf("redelivery failed: %v\n%s", failed, e.logs.String())
		}
		e.checkDelivered(t, "op-cont")
		k0, k1 := keyOf(rec, 0), keyOf(rec, 1)
		if e.sim.FileGets() != 2 || e.art.Puts(k0) != 1 || e.art.Puts(k1) != 1 || e.art.Stats(k0) != 1 {
			t.Fatalf("%d downloads; puts %d/%d; stats of output 0 %d", e.sim.FileGets(), e.art.Puts(k0), e.art.Puts(k1), e.art.Stats(k0))
		}
	})
}

func TestDuplicateAfterDeliveredIsObsolete(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		e := newEnv(t, kind, options{})
		m := e.succeed(t, "op-dup")
		e.deliver(t, m)
		done := e.checkDelivered(t, "op-dup")
		gets, files := e.gen.Gets(), e.sim.FileGets()
		copyOf := m
		copyOf.ID = "copy"
		current := handlertest.Sent{ID: "rearm", Env: message.Envelope{Action: message.ActionDeliverArtifacts, OperationID: "op-dup",
			ExpectedRevision: done.Revision, ExpectedRemoteJobID: done.RemoteJobID}}
		if failed := e.deliver(t, m, copyOf, current); len(failed) != 0 {
			t.Fatalf("duplicates failed: %v", failed)
		}
		after := handlertest.Get(t, e.store, "op-dup")
		if after.Revision != done.Revision || e.gen.Gets() != gets || e.sim.FileGets() != files || e.out.Len() != 0 {
			t.Fatalf("duplicates: r%d → r%d, %d GETs, %d downloads, %d sent", done.Revision, after.Revision,
				e.gen.Gets()-gets, e.sim.FileGets()-files, e.out.Len())
		}
		if !strings.Contains(e.logs.String(), `"reason":"already_delivered"`) {
			t.Fatal("no obsolete acknowledgement logged")
		}
	})
}

// The signed URL expires between the GET and the download: the handler
// reads the job again for a fresh URL and copies. Twice in a row, it
// records the failure and retries later.
func TestExpiredSignedURLIsRefreshed(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		e := newEnv(t, kind, options{outputs: 1})
		expire := func() { e.clk.Advance(16 * time.Minute) } // the simulator signs for 15
		m := e.succeed(t, "op-exp")
		e.gen.beforeDownload = []func(){expire}
		gets := e.gen.Gets()
		if failed := e.deliver(t, m); len(failed) != 0 {
			t.Fatalf("failures %v\n%s", failed, e.logs.String())
		}
		e.checkDelivered(t, "op-exp")
		if e.gen.Gets()-gets != 2 || e.sim.FileGets() != 2 {
			t.Fatalf("%d GETs (want the first and a refresh), %d downloads (want the expired one and the copy)", e.gen.Gets()-gets, e.sim.FileGets())
		}

		m2 := e.succeed(t, "op-exp2")
		e.gen.beforeDownload = []func(){expire, expire}
		if failed := e.deliver(t, m2); len(failed) != 0 {
			t.Fatalf("failures %v", failed)
		}
		got := handlertest.Get(t, e.store, "op-exp2")
		retry := e.out.Take()
		if got.Phase != operation.PhaseSucceeded || got.LastError != "signed_url_expired" || got.Counters.ReadFailures != 1 || len(retry) != 1 {
			t.Fatalf("phase %s, last error %q, failures %d, sent %+v", got.Phase, got.LastError, got.Counters.ReadFailures, retry)
		}
		e.clk.Advance(retry[0].Delay)
		e.deliver(t, retry[0])
		e.checkDelivered(t, "op-exp2")
	})
}

// A worker that read the record, then stalled while another completed the
// delivery, never writes over the delivered (terminal) record.
func TestStaleWorkerNeverOverwritesDelivered(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		e := newEnv(t, kind, options{})
		m := e.succeed(t, "op-race")
		entered, release := e.gen.hold()
		done := make(chan []string)
		go func() {
			resp, _ := e.del.Handle(context.Background(), handlertest.Event(t, e.clk.Now(), m))
			done <- handlertest.Failed(resp)
		}()
		<-entered // worker A loaded revision R and read the job
		rearm := m
		rearm.ID = "sweep-rearm" // the sweep's copy at the same revision
		if failed := e.deliver(t, rearm); len(failed) != 0 {
			t.Fatalf("worker B failed: %v", failed)
		}
		afterB := e.checkDelivered(t, "op-race")
		close(release)
		if failed := <-done; len(failed) != 0 {
			t.Fatalf("worker A failed %v; finding the work done is a normal acknowledgement", failed)
		}
		after := handlertest.Get(t, e.store, "op-race")
		if after.Revision != afterB.Revision || after.LastAppliedMessageID != rearm.ID || after.Deliveries[0] != afterB.Deliveries[0] {
			t.Fatalf("A wrote over B: r%d → r%d, last applied %q", afterB.Revision, after.Revision, after.LastAppliedMessageID)
		}
		if e.sim.FileGets() != 2 || e.out.Len() != 0 {
			t.Fatalf("%d downloads (A must reuse B's copies), %d sent", e.sim.FileGets(), e.out.Len())
		}
	})
}

func TestMalformedAndUnknownMessagesFail(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "bolt", options{})
	cases := []struct {
		name string
		ev   func() []string
	}{
		{"not json", func() []string { return e.failedRaw(t, "{not json") }},
		{"deliver without job id", func() []string {
			return e.failedRaw(t, `{"action":"deliver_artifacts","operation_id":"op-x","expected_revision":1,"attempt":0}`)
		}},
		{"observe action on the deliver queue", func() []string {
			return e.failedRaw(t, `{"action":"observe_generation","operation_id":"op-x","expected_revision":1,"expected_remote_job_id":"job_x","attempt":0}`)
		}},
		{"unknown operation", func() []string {
			return e.deliver(t, handlertest.Sent{ID: "ghost", Env: message.Envelope{Action: message.ActionDeliverArtifacts, OperationID: "op-nobody", ExpectedRevision: 1, ExpectedRemoteJobID: "job_x"}})
		}},
	}
	for _, c := range cases {
		if failed := c.ev(); len(failed) != 1 {
			t.Errorf("%s: failures %v, want the record failed towards the DLQ", c.name, failed)
		}
	}
	if e.sim.FileGets() != 0 || e.gen.Gets() != 0 {
		t.Fatal("a bad message reached Genace")
	}
}

func (e *env) failedRaw(t *testing.T, body string) []string {
	t.Helper()
	resp, err := e.del.Handle(context.Background(), handlertest.Raw("raw", body))
	if err != nil {
		t.Fatal(err)
	}
	return handlertest.Failed(resp)
}

// Outputs that no longer match what observation recorded cannot be
// verified: no retry can deliver them, so the operation is parked for
// review, with nothing stored.
func TestChangedRemoteOutputsFailPermanently(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		e := newEnv(t, kind, options{})
		e.succeed(t, "op-tamper")
		rec := handlertest.Get(t, e.store, "op-tamper")
		rec.Remote.Outputs[1].SHA256 = strings.Repeat("ab", 32)
		saved, err := e.store.Update(context.Background(), rec, rec.Revision)
		if err != nil {
			t.Fatal(err)
		}
		m := handlertest.Sent{ID: "tampered", Env: message.Envelope{Action: message.ActionDeliverArtifacts, OperationID: "op-tamper",
			ExpectedRevision: saved.Revision, ExpectedRemoteJobID: saved.RemoteJobID}}
		if failed := e.deliver(t, m); len(failed) != 0 {
			t.Fatalf("failures %v: a delivery no retry can complete must be parked, not dead-lettered", failed)
		}
		e.checkParked(t, "op-tamper", saved)
		if e.sim.FileGets() != 0 || e.art.Puts(keyOf(rec, 0)) != 0 {
			t.Fatalf("%d downloads, %d puts", e.sim.FileGets(), e.art.Puts(keyOf(rec, 0)))
		}
	})
}

// checkParked asserts that a delivery no retry can complete left the
// operation parked at the revision after was: phase succeeded, nothing
// delivered, out of the sweep's index (a delivery left due there was
// re-armed by every sweep run, dead-lettered each time, forever), no
// follow-up sent, and one open review that says why.
func (e *env) checkParked(t *testing.T, id string, was operation.Record) {
	t.Helper()
	got := handlertest.Get(t, e.store, id)
	if got.Phase != operation.PhaseSucceeded || got.Parked == nil || got.Schedule != nil || got.Active() || len(got.Deliveries) != 0 || got.Revision != was.Revision+1 {
		t.Fatalf("record %s r%d → r%d, parked %+v, schedule %+v, active %t, deliveries %+v; want parked at r%d\n%s",
			got.Phase, was.Revision, got.Revision, got.Parked, got.Schedule, got.Active(), got.Deliveries, was.Revision+1, e.logs.String())
	}
	if e.out.Len() != 0 {
		t.Fatalf("follow-ups sent: %+v", e.out.Take())
	}
	open, err := e.store.OpenReviewsOf(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if len(open) != 1 || open[0].ID != review.ParkedID(id, got.Revision) || !strings.Contains(open[0].Reason, got.Parked.Reason) {
		t.Fatalf("open reviews %+v; want the parked one", open)
	}
}

// At MaxCopyFailures the operation parks with one review. Before, the
// message failed towards a DLQ it never reached (the sweep re-armed the
// due record first), and the failure looped silently.
func TestRepeatedFailuresPark(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "bolt", options{outputs: 1, cfg: deliver.Config{MaxCopyFailures: 3}})
	m := e.succeed(t, "op-down")
	rec := handlertest.Get(t, e.store, "op-down")
	e.art.failPuts(keyOf(rec, 0), -1) // always
	next := m
	for i := 1; i <= 2; i++ {
		e.clk.Advance(next.Delay)
		if failed := e.deliver(t, next); len(failed) != 0 {
			t.Fatalf("failure %d failed the message: %v", i, failed)
		}
		sent := e.out.Take()
		if len(sent) != 1 || handlertest.Get(t, e.store, "op-down").Counters.ReadFailures != i {
			t.Fatalf("after failure %d: sent %+v", i, sent)
		}
		next = sent[0]
	}
	e.clk.Advance(next.Delay)
	before := handlertest.Get(t, e.store, "op-down")
	if failed := e.deliver(t, next); len(failed) != 0 {
		t.Fatalf("third consecutive failure: failures %v, want the message acknowledged", failed)
	}
	e.checkParked(t, "op-down", before)
	open, _ := e.store.OpenReviewsOf(context.Background(), "op-down")
	if open[0].ErrorCategory != "artifact_copy_failed" || !strings.Contains(open[0].Reason, rec.RemoteJobID) || !strings.Contains(open[0].Reason, "3 failed attempt(s)") {
		t.Fatalf("review %+v; want the job, the category and the count", open[0])
	}
}

// A failure write lands but its retry message is lost (crash before the
// send): the redelivered message re-sends the retry instead of copying
// before the backoff.
func TestCrashAfterFailureWriteReemitsTheRetry(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		e := newEnv(t, kind, options{})
		m := e.succeed(t, "op-crash")
		rec := handlertest.Get(t, e.store, "op-crash")
		e.art.failPuts(keyOf(rec, 1), 1)
		e.out.FailNext(1)
		if failed := e.deliver(t, m); len(failed) != 1 {
			t.Fatalf("a lost follow-up must fail the message; failures %v", failed)
		}
		written := handlertest.Get(t, e.store, "op-crash")
		files := e.sim.FileGets()
		if failed := e.deliver(t, m); len(failed) != 0 {
			t.Fatalf("failures %v", failed)
		}
		sent := e.out.Take()
		if len(sent) != 1 || sent[0].Env.ExpectedRevision != written.Revision || sent[0].Delay <= 0 {
			t.Fatalf("re-emitted %+v, want one delayed retry at r%d", sent, written.Revision)
		}
		if e.sim.FileGets() != files || handlertest.Get(t, e.store, "op-crash").Revision != written.Revision {
			t.Fatal("the re-emission copied or wrote")
		}
		e.clk.Advance(sent[0].Delay)
		e.deliver(t, sent[0])
		e.checkDelivered(t, "op-crash")
	})
}

// Without a lease that covers the next copy, the worker keeps its
// progress and hands the rest on to a fresh message; having stored
// nothing, it waits the retry backoff first, so a renewal that always
// fails (a missing permission) cannot spin.
func TestLeaseLossHandsTheRestOn(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "bolt", options{cfg: deliver.Config{Visibility: 30 * time.Second, CopyTimeout: time.Minute}})
	m := e.succeed(t, "op-lease")
	rec := handlertest.Get(t, e.store, "op-lease")
	e.ext.Fail = true
	if failed := e.deliver(t, m); len(failed) != 0 {
		t.Fatalf("failures %v", failed)
	}
	sent := e.out.Take()
	if len(sent) != 1 || sent[0].Env.ExpectedRevision != rec.Revision || sent[0].Delay <= 0 || e.sim.FileGets() != 0 {
		t.Fatalf("sent %+v, %d downloads; want one delayed hand-on and no copy", sent, e.sim.FileGets())
	}
	e.ext.Fail = false
	e.clk.Advance(sent[0].Delay)
	e.deliver(t, sent[0])
	e.checkDelivered(t, "op-lease")
}

func TestDeliversToS3(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "bolt", options{s3: true})
	m := e.succeed(t, "op-s3")
	if failed := e.deliver(t, m); len(failed) != 0 {
		t.Fatalf("failures %v\n%s", failed, e.logs.String())
	}
	e.checkDelivered(t, "op-s3")
	// A replay after delivery copies nothing; a fresh store Stat agrees.
	rec := handlertest.Get(t, e.store, "op-s3")
	s := artifact.NewS3(e.s3, e.bucket)
	for i, desc := range rec.Remote.Outputs {
		obj, ok, err := s.Stat(context.Background(), keyOf(rec, i))
		if err != nil || !ok || obj.SHA256 != desc.SHA256 || obj.Size != desc.SizeBytes {
			t.Fatalf("output %d in S3: %+v %v %v", i, obj, ok, err)
		}
	}
}

func TestNoSecretInLogsOrMetrics(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "bolt", options{cfg: deliver.Config{Visibility: time.Hour}})
	m := e.succeed(t, "op-logs")
	rec := handlertest.Get(t, e.store, "op-logs")
	e.gen.beforeDownload = []func(){func() { e.clk.Advance(16 * time.Minute) }}
	e.art.failPuts(keyOf(rec, 1), 1)
	e.deliver(t, m)
	retry := e.out.Take()
	e.clk.Advance(retry[0].Delay)
	e.deliver(t, retry[0])
	e.checkDelivered(t, "op-logs")
	for what, text := range map[string]string{"logs": e.logs.String(), "metrics": e.mets.String()} {
		for _, leak := range []string{handlertest.APIKey, "sig=", "expires=", "/files/", "lighthouse"} {
			if strings.Contains(text, leak) {
				t.Errorf("%q in %s", leak, what)
			}
		}
	}
	if !strings.Contains(e.logs.String(), "output stored") || !strings.Contains(e.logs.String(), "signed URL expired") {
		t.Fatal("no logs to check")
	}
}

// An object already under an output's key with the right size but other
// content (not what Genace reported) is neither taken as the delivered
// output nor replaced: no retry can store the output, so the operation is
// parked for review, the record gains no delivery, and the object stays
// as found. A redelivery whose park was written but whose review was not
// writes the review.
func TestExistingObjectWithWrongSHA256IsRefused(t *testing.T) {
	t.Parallel()
	for _, backend := range []struct {
		name string
		s3   bool
	}{{"dir", false}, {"s3", true}} {
		t.Run(backend.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			e := newEnv(t, "bolt", options{outputs: 1, s3: backend.s3})
			m := e.succeed(t, "op-squat")
			rec := handlertest.Get(t, e.store, "op-squat")
			desc, key := rec.Remote.Outputs[0], keyOf(rec, 0)
			other := []byte(strings.Repeat("x", int(desc.SizeBytes)))
			sum := sha256.Sum256(other)
			otherSum := hex.EncodeToString(sum[:])
			if otherSum == desc.SHA256 {
				t.Fatal("the planted object must differ from the output")
			}
			if _, err := e.art.inner.Put(ctx, key, bytes.NewReader(other), desc.SizeBytes, otherSum, desc.ContentType); err != nil {
				t.Fatal(err)
			}
			e.st.failReview = 1 // the worker's review write fails once
			if failed := e.deliver(t, m); len(failed) != 1 {
				t.Fatalf("failures %v: a review write that failed must fail the message for redelivery\n%s", failed, e.logs.String())
			}
			if failed := e.deliver(t, m); len(failed) != 0 {
				t.Fatalf("failures %v: an object of the right size with another sha256 must not pass as the output\n%s", failed, e.logs.String())
			}
			e.checkParked(t, "op-squat", rec)
			if e.sim.FileGets() != 0 || e.art.Puts(key) != 0 {
				t.Fatalf("%d downloads, %d puts; want none", e.sim.FileGets(), e.art.Puts(key))
			}
			if stored := e.stored(t, key); stored != otherSum {
				t.Fatalf("the object under %s changed: sha256 %s", key, stored)
			}
			if !strings.Contains(e.logs.String(), artifact.ErrConflict.Error()) {
				t.Fatalf("not refused as a conflict:\n%s", e.logs.String())
			}
		})
	}
}

// The copy budget is sized to ride out hours of a 5xx or S3 outage: with
// the default backoff at its shortest jitter, the retries between the
// first failure and the park span at least 4 hours.
func TestDefaultCopyBudgetCoversHours(t *testing.T) {
	t.Parallel()
	cfg := deliver.Config{}.Defaults()
	var span time.Duration
	for n := 1; n < cfg.MaxCopyFailures; n++ {
		span += cfg.Retry.Delay(n-1, func() float64 { return 0 })
	}
	if span < 4*time.Hour {
		t.Fatalf("%d failures park after %s of retries; want at least 4h", cfg.MaxCopyFailures, span)
	}
}

// A 429 on the job's GET or on a download is waited out for its
// Retry-After and counts towards no cap: more of them than
// MaxCopyFailures in a row neither park the operation nor count a
// failure. Before, each was a failure retried after 10 s doubling,
// whatever Retry-After said, and the third here sent the message towards
// the DLQ.
func TestRateLimitedDeliveryWaitsRetryAfterAndCountsNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "bolt", options{outputs: 1, cfg: deliver.Config{MaxCopyFailures: 3}})
	next := e.succeed(t, "op-busy")
	job := handlertest.Get(t, e.store, "op-busy").RemoteJobID
	e.sim.ScriptGET(job, genacesim.RateLimited(40*time.Second), genacesim.RateLimited(40*time.Second), genacesim.NoFault(), genacesim.NoFault())
	e.sim.ScriptFile(job, genacesim.RateLimited(40*time.Second), genacesim.RateLimited(40*time.Second))
	for i := 1; i <= 4; i++ {
		e.clk.Advance(next.Delay)
		if failed := e.deliver(t, next); len(failed) != 0 {
			t.Fatalf("429 %d failed the message: %v", i, failed)
		}
		got := handlertest.Get(t, e.store, "op-busy")
		sent := e.out.Take()
		if got.Parked != nil || got.Counters.ReadFailures != 0 || len(sent) != 1 || sent[0].Delay < 40*time.Second || sent[0].Delay > 48*time.Second {
			t.Fatalf("after 429 %d: parked %+v, %d failures, sent %+v; want a retry after Retry-After (40 s) plus at most a fifth of it", i, got.Parked, got.Counters.ReadFailures, sent)
		}
		next = sent[0]
	}
	e.clk.Advance(next.Delay)
	if failed := e.deliver(t, next); len(failed) != 0 {
		t.Fatal(failed)
	}
	if got := handlertest.Get(t, e.store, "op-busy"); got.Phase != operation.PhaseDelivered {
		t.Fatalf("after the 429s: %s", got.Phase)
	}
	n := 0
	for _, line := range strings.Split(e.mets.String(), "\n") {
		if strings.Contains(line, `"`+metrics.GenaceThrottled+`":`) {
			n++
		}
	}
	if n != 4 {
		t.Fatalf("%d %s points for 4 429s", n, metrics.GenaceThrottled)
	}
}

// A 429's write lands but its retry message is lost: the redelivered
// message re-sends the retry instead of downloading before Retry-After.
// Before, only a write that counted a failure was recognised, so this one
// downloaded again at once, into the rate limit.
func TestCrashAfterThrottleWriteReemitsTheRetry(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "bolt", options{outputs: 1})
	m := e.succeed(t, "op-crash")
	job := handlertest.Get(t, e.store, "op-crash").RemoteJobID
	e.sim.ScriptFile(job, genacesim.RateLimited(40*time.Second))
	e.out.FailNext(1)
	if failed := e.deliver(t, m); len(failed) != 1 {
		t.Fatalf("a lost follow-up must fail the message; failures %v", failed)
	}
	written := handlertest.Get(t, e.store, "op-crash")
	files := e.sim.FileGets()
	if failed := e.deliver(t, m); len(failed) != 0 {
		t.Fatalf("failures %v", failed)
	}
	sent := e.out.Take()
	if len(sent) != 1 || sent[0].Env.ExpectedRevision != written.Revision || sent[0].Delay < 39*time.Second {
		t.Fatalf("re-emitted %+v, want one retry after Retry-After at r%d", sent, written.Revision)
	}
	if e.sim.FileGets() != files {
		t.Fatal("the re-emission downloaded")
	}
}
