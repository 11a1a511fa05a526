package benchmark

import (
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Dist is a delay distribution: log-normal with the given median and 99th
// percentile (P99 ≤ Median: the median, always). The zero Dist is no delay.
type Dist struct {
	Median, P99 time.Duration
}

// z99 is the standard normal's 99th percentile.
const z99 = 2.3263478740408408

// Draw is one delay from d with r.
func (d Dist) Draw(r *rand.Rand) time.Duration {
	if d.Median <= 0 {
		return 0
	}
	if d.P99 <= d.Median {
		return d.Median
	}
	sigma := math.Log(float64(d.P99)/float64(d.Median)) / z99
	return time.Duration(float64(d.Median) * math.Exp(sigma*r.NormFloat64()))
}

// String says the distribution in a table cell.
func (d Dist) String() string {
	if d.P99 <= d.Median {
		return d.Median.String()
	}
	return d.Median.String() + " (p99 " + d.P99.String() + ")"
}

// Latency is what the virtual run adds at each boundary the handlers
// meet in AWS. Each default's source is in DefaultLatency.
type Latency struct {
	// RTT is a Genace request's round trip: half before it reaches
	// Genace, half on the way back.
	RTT Dist
	// Pickup is from a message becoming visible to a receive taking it
	// (the event source mapping's poll, or an invocation's own receive).
	Pickup Dist
	// Start is from a batch's receive to its handler starting (a warm
	// sandbox's invoke, or a cold start).
	Start Dist
	// Wake is how long Genace takes to answer a held long poll once the
	// job changed.
	Wake Dist
}

// DefaultLatency is the stated condition for detection (200 ms
// round trips, 500 ms pickup), and assumptions for the rest: a warm
// invoke of a few tens of milliseconds with a tail of cold starts (the
// bootstraps' own init measures ~20 ms under the emulator, section 4;
// Lambda's sandbox start is on top), and a Genace that wakes a held poll
// within tens of milliseconds. None of these is measured against AWS.
var DefaultLatency = Latency{
	RTT:    Dist{Median: 200 * time.Millisecond, P99: 400 * time.Millisecond},
	Pickup: Dist{Median: 500 * time.Millisecond, P99: time.Second},
	Start:  Dist{Median: 30 * time.Millisecond, P99: 300 * time.Millisecond},
	Wake:   Dist{Median: 50 * time.Millisecond, P99: 200 * time.Millisecond},
}

// draws is a seeded source shared by the run's goroutines.
type draws struct {
	mu sync.Mutex
	r  *rand.Rand
}

func newDraws(seed uint64) *draws { return &draws{r: rand.New(rand.NewPCG(seed, 0x1a7e))} }

func (d *draws) draw(x Dist) time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	return x.Draw(d.r)
}

// inProcess serves Genace requests from the simulator's handler in this
// process, with Latency's round trip and wake added on the clock: on a
// synctest bubble's clock a long poll then costs no wall time, and no
// socket holds the bubble's time still.
type inProcess struct {
	h   http.Handler
	lat Latency
	d   *draws
	c   *genaceLoad
}

// genaceLoad is what Genace saw of a run: requests per clock second at
// their peak, the ones it refused for its rate limit, and each job's
// reads as they reached it.
type genaceLoad struct {
	mu                   sync.Mutex
	second               int64
	inSecond, peak, r429 int
	reads                map[string][]read
}

// read is one GET of a job as Genace saw it: when it arrived, how long it
// might be held, and when Genace answered (before the way back), or the
// client gave up on it (cancelled).
type read struct {
	arrived, answered time.Time
	wait              time.Duration
	cancelled         bool
}

func (g *genaceLoad) read(jobID string, r read) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.reads == nil {
		g.reads = map[string][]read{}
	}
	g.reads[jobID] = append(g.reads[jobID], r)
}

// Blind says why a render's finish was seen late, from its job's reads
// at Genace: what was there to see it when it finished.
type Blind string

// The causes of a late detection.
const (
	// BlindBeforeFirstRead: the job finished before its first read
	// reached Genace, which held that read its whole window (it answers
	// a change after a read's arrival, and none came).
	BlindBeforeFirstRead Blind = "finished before its first read reached Genace"
	// BlindAfterChange: no read was held when it finished; the last one
	// had been answered by the job's previous change (queued→running),
	// and the next arrived after the finish, a round trip later.
	BlindAfterChange Blind = "finished within a round trip of its previous change, before the next read arrived"
	// BlindGap: no read was held when it finished, and the last one had
	// run out its window, been refused (a 429) or been given up by the
	// client (a gap between windows, a hand-over).
	BlindGap Blind = "no read held at Genace when it finished (a gap between windows, or a read refused or given up)"
	// BlindHeld: a read was held when it finished, so Genace answered
	// it; the delay was on the client's side.
	BlindHeld Blind = "a read was held at the finish; the answer's handling was late"
)

// blind classifies a finish at end by the reads of its job.
func blind(reads []read, end time.Time) Blind {
	var last *read
	for i := range reads {
		r := &reads[i]
		if r.arrived.After(end) {
			continue
		}
		if !r.answered.Before(end) {
			return BlindHeld
		}
		if last == nil || r.answered.After(last.answered) {
			last = r
		}
	}
	switch {
	case last == nil:
		return BlindBeforeFirstRead
	case !last.cancelled && last.wait > 0 && last.answered.Before(last.arrived.Add(last.wait)):
		return BlindAfterChange
	}
	return BlindGap
}

func (g *genaceLoad) arrived(now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if s := now.Unix(); s != g.second {
		g.second, g.inSecond = s, 0
	}
	g.inSecond++
	g.peak = max(g.peak, g.inSecond)
}

func (g *genaceLoad) answered(status int) {
	if status == http.StatusTooManyRequests {
		g.mu.Lock()
		g.r429++
		g.mu.Unlock()
	}
}

func (t inProcess) RoundTrip(r *http.Request) (*http.Response, error) {
	half := t.d.draw(t.lat.RTT) / 2
	if err := sleep(r, half); err != nil {
		return nil, err
	}
	rec := httptest.NewRecorder()
	sent := time.Now()
	t.c.arrived(sent)
	t.h.ServeHTTP(rec, r)
	t.c.answered(rec.Code)
	wait, err := strconv.Atoi(r.URL.Query().Get("wait"))
	if err != nil {
		wait = 0
	}
	if id, ok := strings.CutPrefix(r.URL.Path, "/api/v1/jobs/"); ok && r.Method == http.MethodGet && !strings.Contains(id, "/") {
		held := time.Duration(wait) * time.Second
		if rec.Code == http.StatusTooManyRequests {
			held = 0
		}
		t.c.read(id, read{arrived: sent, answered: time.Now(), wait: held, cancelled: r.Context().Err() != nil})
	}
	if wait > 0 && time.Since(sent) < time.Duration(wait)*time.Second {
		// Answered before its window ran out: the job changed.
		half += t.d.draw(t.lat.Wake)
	}
	if err := sleep(r, half); err != nil {
		return nil, err
	}
	return rec.Result(), nil
}

func sleep(r *http.Request, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-r.Context().Done():
		return r.Context().Err()
	}
}
