package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/fastover/fastover/leader"
)

// actingLog records when the leader acts, for tests that check from
// outside that no two replicas ever act at once (the replicas share the
// machine's wall clock). Each action is a check of IsLeader, as a careful
// controller makes before each write; a line is written only where it
// says yes, dated right after the check:
//
//	<unix ns> <identity> start <term>
//	<unix ns> <identity> act
//	<unix ns> <identity> stop <Run's error>
type actingLog struct {
	f       *os.File
	elector *leader.Elector
}

func openActingLog(path string, e *leader.Elector) (*actingLog, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("--acting-log: %w", err)
	}
	return &actingLog{f: f, elector: e}, nil
}

func (a *actingLog) line(at time.Time, what string) {
	// One write per line, O_APPEND: lines of several processes never mix.
	_, _ = fmt.Fprintf(a.f, "%d %s %s\n", at.UnixNano(), a.elector.Identity(), what)
}

// run acts every 10 ms until ctx ends.
func (a *actingLog) run(ctx context.Context) {
	if a == nil {
		<-ctx.Done()
		return
	}
	a.line(time.Now(), fmt.Sprintf("start %d", a.elector.Term()))
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if ctx.Err() != nil || !a.elector.IsLeader() {
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

func (a *actingLog) stop(err error) {
	if a == nil {
		return
	}
	reason := "nil"
	if err != nil {
		reason = strings.ReplaceAll(err.Error(), "\n", " ")
	}
	a.line(time.Now(), "stop "+reason)
}

func (a *actingLog) close() {
	if a != nil {
		_ = a.f.Close()
	}
}
