package queue

// Depth counts a queue's messages by state, as SQS's ApproximateNumberOfMessages, ...NotVisible and ...Delayed do.
type Depth struct {
	Visible, InFlight, Delayed int
}

// Total is every message the queue holds, whatever its state.
func (d Depth) Total() int { return d.Visible + d.InFlight + d.Delayed }
