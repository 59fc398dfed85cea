package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

var errExited = errors.New("exited")

// WaitUntil polls cond every 100ms until it holds, the process exits, or
// ctx ends; both failures carry the tail of the process's log.
func (p *Process) WaitUntil(ctx context.Context, cond func(ctx context.Context) (bool, error)) error {
	exited := p.Exited()
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		select {
		case <-exited:
			return false, errExited
		default:
		}
		return cond(ctx)
	})
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errExited):
		how := "exit status 0"
		if exitErr := p.ExitErr(); exitErr != nil {
			how = exitErr.Error()
		}
		return fmt.Errorf("%s exited (%s) before it was ready; its log ends with:\n%s", p.name, how, p.Tail(30))
	case ctx.Err() != nil:
		return fmt.Errorf("%s not ready: %w; its log ends with:\n%s", p.name, ctx.Err(), p.Tail(30))
	default:
		return fmt.Errorf("%s: %w; its log ends with:\n%s", p.name, err, p.Tail(30))
	}
}

// WaitHTTP waits, as WaitUntil, until url (such as a /readyz the process
// serves) answers 200.
func (p *Process) WaitHTTP(ctx context.Context, url string) error {
	client := &http.Client{Timeout: time.Second}
	if p.ns != nil {
		// The process listens inside its network namespace.
		client.Transport = &http.Transport{DialContext: p.ns.DialContext}
		defer client.CloseIdleConnections()
	}
	return p.WaitUntil(ctx, func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, http.NoBody)
		if err != nil {
			return false, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return false, nil //nolint:nilerr // not serving yet
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}
