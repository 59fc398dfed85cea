package main

import (
	"context"
	"fmt"
	"os"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
)

// actingLog records when the leader acts, in fastover-example's format
// (internal/acting reads both), so that a test can check from outside
// that no two replicas, of either kind, ever act at once. An action is a
// check of the elector's IsLeader, as a client-go controller would make
// before each write; a line is written only where it says yes:
//
//	<unix ns> <identity> start <term>
//	<unix ns> <identity> act
//	<unix ns> <identity> stop
type actingLog struct {
	f      *os.File
	id     string
	client kubernetes.Interface
	ns     string
	lease  string
}

func openActingLog(path, id string, client kubernetes.Interface, ns, lease string) (*actingLog, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("--acting-log: %w", err)
	}
	return &actingLog{f: f, id: id, client: client, ns: ns, lease: lease}, nil
}

func (a *actingLog) line(at time.Time, what string) {
	// One write per line, O_APPEND: lines of several processes never mix.
	_, _ = fmt.Fprintf(a.f, "%d %s %s\n", at.UnixNano(), a.id, what)
}

// run acts every 10 ms while le leads, until ctx ends. client-go's elector
// does not tell its term: the Lease's transition count is read once (for
// the log only).
func (a *actingLog) run(ctx context.Context, le *leaderelection.LeaderElector) {
	if a == nil {
		<-ctx.Done()
		return
	}
	start := time.Now()
	term := -1
	if l, err := a.client.CoordinationV1().Leases(a.ns).Get(ctx, a.lease, metav1.GetOptions{}); err == nil && l.Spec.LeaseTransitions != nil {
		term = int(*l.Spec.LeaseTransitions)
	}
	a.line(start, fmt.Sprintf("start %d", term))
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if ctx.Err() != nil || !le.IsLeader() {
			return
		}
		a.line(time.Now(), "act")
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (a *actingLog) stop() {
	if a != nil {
		a.line(time.Now(), "stop nil")
	}
}

func (a *actingLog) close() {
	if a != nil {
		_ = a.f.Close()
	}
}
