package faultsim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/genjobs/genjobs/internal/dev/genacesim"
)

// modelCount is how many simulated models a run spreads its operations
// over. Genace's simulator fixes durations and outcomes per model, so the
// variety of renders comes from many models with seeded parameters.
const modelCount = 48

// models draws the run's models: render times log-normal (median ~2 s
// queued and ~15 s running, a long tail to tens of minutes), about one in
// eight failing (charged, then refunded), a quarter with several outputs.
func models(rng *rand.Rand) map[string]genacesim.ModelConfig {
	lognormal := func(median time.Duration, sigma float64, ceiling time.Duration) time.Duration {
		d := time.Duration(float64(median) * math.Exp(sigma*rng.NormFloat64()))
		return min(max(d, 0), ceiling).Round(100 * time.Millisecond)
	}
	out := make(map[string]genacesim.ModelConfig, modelCount)
	for i := range modelCount {
		mc := genacesim.ModelConfig{
			Price:    int64(4 + rng.IntN(20)),
			QueueFor: lognormal(2*time.Second, 0.8, time.Minute),
			RunFor:   lognormal(15*time.Second, 1.1, 20*time.Minute),
			Outcome:  genacesim.OutcomeSucceed,
		}
		if rng.Float64() < 0.12 {
			mc.Outcome = genacesim.OutcomeFail
		}
		switch r := rng.Float64(); {
		case r < 0.75:
			mc.OutputCount = 1
		case r < 0.92:
			mc.OutputCount = 2
		default:
			mc.OutputCount = 3
		}
		out[modelName(i)] = mc
	}
	return out
}

func modelName(i int) string { return fmt.Sprintf("sim-model-%02d", i) }

// opSpec is one operation of the workload and the user or operator
// events planned for it.
type opSpec struct {
	id      string
	model   string
	price   int64
	created time.Duration // after the run's start
	// Offsets after creation of the planned events; negative means none.
	changeAt, supersedeAt, reconcileAt, unauthorizedAt time.Duration
	// persistent is the persistent fault that strikes the operation for
	// the whole run ("" none).
	persistent Fault
	// The intake faults planned: createRace, changeRace and cancelRace
	// the interleaving (raceBefore, raceAfter, or 0 none), lostAnswers how
	// many create answers are lost before one arrives, intakeChangeAt
	// and cancelAt when the application changes or cancels (negative: not,
	// or not at a time of its own).
	createRace, changeRace   int
	cancelRace               int
	lostAnswers              int
	intakeChangeAt, cancelAt time.Duration
}

// The interleavings of a raced call with the store write it races:
// run before the write applies, or after it applied, before it returns.
const (
	raceBefore = 1
	raceAfter  = 2
)

// opID names operation i.
func opID(i int) string { return fmt.Sprintf("op-%06d", i) }

// opIndex is the workload index of operation id (-1 if it names none).
func (w *world) opIndex(id string) int {
	i, err := strconv.Atoi(strings.TrimPrefix(id, "op-"))
	if err != nil || i < 0 || i >= len(w.ops) || w.ops[i].id != id {
		return -1
	}
	return i
}

// workload draws n operations created evenly over interval, each with a
// seeded model, and plans the user's changes and Genace operators'
// reconciliations the fault knobs ask for. The plans are drawn here, in
// creation order, so they do not depend on how the run unfolds.
func workload(n int, interval time.Duration, rng *rand.Rand, ms map[string]genacesim.ModelConfig, in *injector, ownModels bool) []opSpec {
	ops := make([]opSpec, n)
	for i := range ops {
		name := modelName(rng.IntN(modelCount))
		if ownModels {
			name = renderModel(i) // Config.Renders: one model per render
		}
		mc := ms[name]
		render := mc.QueueFor + mc.RunFor
		op := opSpec{id: opID(i), model: name, price: mc.Price, changeAt: -1, supersedeAt: -1, reconcileAt: -1, unauthorizedAt: -1, intakeChangeAt: -1, cancelAt: -1}
		if n > 1 {
			op.created = time.Duration(float64(interval) * float64(i) / float64(n))
		}
		if in.roll(UserChangeSpec) {
			// Mostly right after creation, before submit has claimed it;
			// sometimes later, which finds it prepared only after a 429.
			if rng.Float64() < 0.7 {
				op.changeAt = 0
			} else {
				op.changeAt = time.Duration(1+rng.IntN(60)) * time.Second
			}
		}
		if in.roll(UserSupersede) {
			op.supersedeAt = time.Second + time.Duration(rng.Int64N(int64(render)+1))
		}
		if in.roll(ReconcileFail) && mc.RunFor > 0 {
			op.reconcileAt = mc.QueueFor + time.Duration(rng.Int64N(int64(mc.RunFor)))
		}
		if in.roll(UnauthorizedChange) {
			// Like an authorized change: mostly before submit claims the
			// request, sometimes after a 429 put it back. Drawn from the
			// fault's own stream, so the rest of the workload stays as it
			// is without this fault.
			if in.intn(UnauthorizedChange, 10) < 7 {
				op.unauthorizedAt = 0
			} else {
				op.unauthorizedAt = time.Duration(1+in.intn(UnauthorizedChange, 60)) * time.Second
			}
		}
		planIntake(&op, in)
		// Every persistent fault rolls on its own stream, whichever
		// strikes, so switching one off leaves the others' operations.
		for _, f := range PersistentKinds {
			if in.roll(f) && op.persistent == "" {
				op.persistent = f
			}
		}
		ops[i] = op
	}
	return ops
}

// planIntake plans op's intake faults, each from its own stream.
func planIntake(op *opSpec, in *injector) {
	if in.roll(IntakeCreateRace) {
		op.createRace = 1 + in.intn(IntakeCreateRace, 2)
	}
	if in.roll(IntakeAnswerLost) {
		op.lostAnswers = 1 + in.intn(IntakeAnswerLost, 9)
	}
	op.intakeChangeAt, op.changeRace = raceClaim(in, IntakeChangeRace)
	op.cancelAt, op.cancelRace = raceClaim(in, IntakeCancel)
}

// raceClaim plans f's call at a moment drawn from f's stream: right
// after the create, before the claim (at 0); inside the claim's write
// (race); or 1–60 s later (at). at is negative when f does not strike
// or races the claim.
func raceClaim(in *injector, f Fault) (at time.Duration, race int) {
	if !in.roll(f) {
		return -1, 0
	}
	switch k := in.intn(f, 4); k {
	case 0:
		return 0, 0
	case 1, 2:
		return -1, k
	}
	return time.Duration(1+in.intn(f, 60)) * time.Second, 0
}
