package mempool

import "github.com/clpool/clpool/cl"

// S30dReleaseQueue does to q's state in p what Close does to each queue
// (qstate.release: its marker released), and nothing
// else: it lets a test put a request's handover where a request under way
// during Close puts it, after Close released the queues, without racing.
func S30dReleaseQueue(p *Pool, q *cl.CommandQueue) error {
	qs, err := p.queueState(q, false, "")
	if err != nil {
		return err
	}
	return qs.release()
}
