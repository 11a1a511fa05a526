package localqueue

import "time"

// msgHeap is a container/heap of messages ordered by visibility time, then
// send order: the top is the message that became (or will become) visible
// first, which makes delivery order deterministic.
type msgHeap []*msg

func (h msgHeap) Len() int { return len(h) }

func (h msgHeap) Less(i, j int) bool {
	if !h[i].visibleAt.Equal(h[j].visibleAt) {
		return h[i].visibleAt.Before(h[j].visibleAt)
	}
	return h[i].seq < h[j].seq
}

func (h msgHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}

func (h *msgHeap) Push(x any) {
	m := x.(*msg)
	m.index = len(*h)
	*h = append(*h, m)
}

func (h *msgHeap) Pop() any {
	old := *h
	n := len(old)
	m := old[n-1]
	old[n-1] = nil // let the deleted message be collected
	m.index = -1
	*h = old[:n-1]
	return m
}

// firstAfter returns the earliest visibility time after now. A node's
// subtree is never earlier than the node, so the walk descends only
// through nodes visible already and stops at the first later one on each
// path: it visits the visible messages and their frontier, not the queue.
func (h msgHeap) firstAfter(now time.Time) (time.Time, bool) {
	var best time.Time
	found := false
	stack := []int{0}
	for len(stack) > 0 {
		i := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if i >= len(h) {
			continue
		}
		if t := h[i].visibleAt; t.After(now) {
			if !found || t.Before(best) {
				best, found = t, true
			}
			continue
		}
		stack = append(stack, 2*i+1, 2*i+2)
	}
	return best, found
}
