// Package supervise runs a process's long-lived loops as one group: each by name, each one's end logged,
// a loop that stops while the process runs started again after a backoff, and the whole group waited for
// at shutdown. tandem-proxy runs its node loops (collectors, suppression, eviction, the reporter, the
// configuration and hook-directory watchers) under one Group, so no loop can die unnoticed: the log says
// which one, tandem_loop_restarts_total counts it, and /healthz fails while it is down.
//
// A panic is not recovered: it is logged with the loop's name and re-raised, so the process exits as Go
// makes it (Kubernetes' runtime.HandleCrash does the same). A loop that panicked may have left shared state
// half-changed; tandem-proxy restarts from its checkpoint instead, under systemd.
package supervise

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
)

// Backoff is the wait before a stopped loop runs again: 1 s doubling to 2 min, with 10 % jitter, reset
// once a run lasted longer than the cap.
func Backoff() wait.Backoff {
	return wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.1, Steps: 1 << 30, Cap: 2 * time.Minute}
}

// Group runs loops until its context ends. The zero value is not usable; use New.
type Group struct {
	ctx      context.Context
	wg       sync.WaitGroup
	backoff  wait.Backoff
	restarts *prometheus.CounterVec

	mu   sync.Mutex
	down map[string]error // loops not running now, and why
}

// New returns a group whose loops run until ctx ends. reg receives tandem_loop_restarts_total; nil keeps
// it unexposed.
func New(ctx context.Context, reg prometheus.Registerer, backoff wait.Backoff) (*Group, error) {
	g := &Group{ctx: ctx, backoff: backoff, down: map[string]error{},
		restarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "tandem", Name: "loop_restarts_total",
			Help: "Times a loop of tandem-proxy stopped while the process ran and was started again, by loop.",
		}, []string{"loop"})}
	if reg != nil {
		if err := reg.Register(g.restarts); err != nil {
			return nil, fmt.Errorf("register loop metrics: %w", err)
		}
	}
	return g, nil
}

// Go runs loop under name until the group's context ends. A loop is expected to return only then; if it
// returns earlier, with an error or not, the group logs it, marks it down and runs it again after the
// backoff.
func (g *Group) Go(name string, loop func(ctx context.Context) error) {
	g.wg.Go(func() {
		logger := klog.FromContext(g.ctx).WithValues("loop", name)
		ctx := klog.NewContext(g.ctx, logger)
		b := g.backoff
		for {
			start := time.Now()
			err := g.run(ctx, name, loop)
			if ctx.Err() != nil {
				return
			}
			if err == nil {
				err = errors.New("returned before tandem-proxy stopped")
			}
			if time.Since(start) > b.Cap {
				b = g.backoff
			}
			delay := b.Step()
			g.setDown(name, err)
			g.restarts.WithLabelValues(name).Inc()
			logger.Error(err, "Loop stopped; starting it again", "after", delay)
			t := time.NewTimer(delay)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			g.setDown(name, nil)
		}
	})
}

// Once runs task under name once: for work that ends by itself, such as waiting for the API server and
// then starting what needs it. An error is logged and leaves the task down (see Check).
func (g *Group) Once(name string, task func(ctx context.Context) error) {
	g.wg.Go(func() {
		logger := klog.FromContext(g.ctx).WithValues("loop", name)
		ctx := klog.NewContext(g.ctx, logger)
		if err := g.run(ctx, name, task); err != nil && ctx.Err() == nil {
			g.setDown(name, err)
			logger.Error(err, "Task failed")
		}
	})
}

func (g *Group) run(ctx context.Context, name string, loop func(context.Context) error) error {
	defer func() {
		if r := recover(); r != nil {
			klog.FromContext(ctx).Error(fmt.Errorf("panic: %v", r), "Loop panicked; tandem-proxy exits", "loop", name)
			panic(r)
		}
	}()
	return loop(ctx)
}

func (g *Group) setDown(name string, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err == nil {
		delete(g.down, name)
		return
	}
	g.down[name] = err
}

// Check returns nil while every loop runs, else an error naming each loop that is down and why.
func (g *Group) Check() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.down) == 0 {
		return nil
	}
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(g.down)) {
		parts = append(parts, fmt.Sprintf("%s: %v", name, g.down[name]))
	}
	return fmt.Errorf("loops down (see tandem-proxy's log): %s", strings.Join(parts, "; "))
}

// Wait blocks until every loop and task has returned: after the group's context ended, or when all
// tasks are done and no loop was started.
func (g *Group) Wait() { g.wg.Wait() }
