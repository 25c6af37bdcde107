// Command metrics serves a pool's statistics while the pool does some
// work: Prometheus metrics (package mempool/metrics) at /metrics, next to
// the Go runtime's, and the pool's MemoryStats, under torch's key names,
// in expvar's /debug/vars. On its way out it prints the pool's summary
// (Pool.WriteSummary).
//
//	go run ./examples/metrics -addr localhost:8080 -duration 1m
//	curl -s localhost:8080/metrics | grep '^clpool_allocated_bytes'
//	curl -s localhost:8080/debug/vars
//
// The work is a loop that allocates blocks of a few sizes, keeping the
// last eight, as a program's temporaries come and go.
package main

import (
	"context"
	"errors"
	"expvar"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"time"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/mempool"
	"github.com/clpool/clpool/mempool/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// config is what the flags set, less the address.
type config struct {
	name  string        // the pool label, and the expvar variable
	every time.Duration // the pause between allocations
	arena bool          // mempool.WithArena rather than exact bins
}

func main() {
	addr := flag.String("addr", "localhost:8080", "the address to serve /metrics and /debug/vars on")
	duration := flag.Duration("duration", 0, "how long to run; 0: until interrupted")
	var cfg config
	flag.StringVar(&cfg.name, "name", "clpool", "the pool's name: its pool label, and its expvar variable")
	flag.DurationVar(&cfg.every, "every", 10*time.Millisecond, "the pause between allocations")
	flag.BoolVar(&cfg.arena, "arena", false, "use the splitting arena (mempool.WithArena) rather than exact bins")
	flag.Parse()
	if err := serve(*addr, *duration, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "metrics:", err)
		os.Exit(1)
	}
}

// serve listens on addr and runs until duration has passed (0: no end) or
// an interrupt comes.
func serve(addr string, duration time.Duration, cfg config, out io.Writer) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, duration)
		defer cancel()
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return run(ctx, ln, cfg, out)
}

// run serves the metrics of a new pool on ln while the pool works, until
// ctx is done, then writes the pool's summary to out. It publishes the
// pool in expvar as cfg.name, which must not be published already.
func run(ctx context.Context, ln net.Listener, cfg config, out io.Writer) error {
	defer ln.Close() // for the returns before Serve, which closes it otherwise
	if cfg.every <= 0 {
		return fmt.Errorf("-every %v: the pause between allocations must be positive", cfg.every)
	}
	q, err := cl.DefaultQueue()
	if err != nil {
		return err
	}
	defer q.Release()
	alloc, err := allocator.NewImmediate(q, cl.MemReadWrite)
	if err != nil {
		return err
	}
	var opts []mempool.Option
	if cfg.arena {
		opts = append(opts, mempool.WithArena())
	}
	pool, err := mempool.New(alloc, opts...)
	if err != nil {
		return err
	}
	defer pool.Close()

	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewCollector(cfg.name, pool), collectors.NewGoCollector())
	if err := metrics.Publish(cfg.name, pool); err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("/debug/vars", expvar.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}

	// The work stops when ctx is done, or when the server fails.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	served := make(chan error, 1)
	go func() {
		served <- srv.Serve(ln)
		cancel()
	}()
	fmt.Fprintf(out, "serving http://%s/metrics and http://%s/debug/vars\n", ln.Addr(), ln.Addr())

	errs := []error{work(ctx, pool, cfg.every)}
	shutdown, cancelShutdown := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelShutdown()
	errs = append(errs, srv.Shutdown(shutdown))
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		errs = append(errs, err)
	}
	errs = append(errs, pool.WriteSummary(out))
	return errors.Join(errs...)
}

// work allocates a block every pause, cycling through a few sizes and
// keeping the last eight blocks, until ctx is done; then it gives back
// the blocks it keeps.
func work(ctx context.Context, pool *mempool.Pool, pause time.Duration) (err error) {
	sizes := []int64{1000, 4000, 64 << 10, 1 << 20, 3 << 20}
	var live []*mempool.PooledBuffer
	defer func() {
		for _, b := range live {
			err = errors.Join(err, b.Close())
		}
	}()
	tick := time.NewTicker(pause)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		b, err := pool.Allocate(sizes[i%len(sizes)])
		if err != nil {
			return err
		}
		live = append(live, b)
		if len(live) > 8 {
			if err := live[0].Close(); err != nil {
				return err
			}
			live = live[1:]
		}
	}
}
