package supervisor

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"time"
)

// Check is when the command is ready to serve: HTTP, a URL that answers
// a GET with a status below 400; TCP, a host:port that takes a connection;
// neither, at once. Both set is an error (Validate).
type Check struct {
	HTTP string
	TCP  string
	// Period is the time between attempts (default 100 ms); each attempt
	// is bounded by a second.
	Period time.Duration
}

// Validate reports what is wrong with c.
func (c Check) Validate() error {
	if c.HTTP != "" && c.TCP != "" {
		return errors.New("--ready-http and --ready-tcp: give one check, not both")
	}
	if c.HTTP != "" {
		u, err := url.Parse(c.HTTP)
		if err != nil {
			return fmt.Errorf("--ready-http=%q: %w", c.HTTP, err)
		}
		if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("--ready-http=%q: want an http:// or https:// URL with a host, such as http://127.0.0.1:8080/readyz", c.HTTP)
		}
	}
	if c.TCP != "" {
		if _, _, err := net.SplitHostPort(c.TCP); err != nil {
			return fmt.Errorf("--ready-tcp=%q: want host:port, such as 127.0.0.1:8080: %w", c.TCP, err)
		}
	}
	return nil
}

// String says what c checks.
func (c Check) String() string {
	switch {
	case c.HTTP != "":
		return "GET " + c.HTTP
	case c.TCP != "":
		return "a TCP connection to " + c.TCP
	}
	return "nothing (ready at once)"
}

// wait returns nil once the check passes, or ctx's error.
func (c Check) wait(ctx context.Context) error {
	if c.HTTP == "" && c.TCP == "" {
		return nil
	}
	period := c.Period
	if period <= 0 {
		period = 100 * time.Millisecond
	}
	var client *http.Client
	if c.HTTP != "" {
		// A new connection per attempt: a check that passes is the
		// command serving now, not a connection kept from before. The
		// command's own certificate is not verified (as the kubelet's
		// HTTPS probes do not).
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.DisableKeepAlives = true
		tr.TLSClientConfig.InsecureSkipVerify = true //nolint:gosec // a readiness probe, as the kubelet's
		defer tr.CloseIdleConnections()
		client = &http.Client{Transport: tr, Timeout: time.Second}
	}
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		if c.once(ctx, client) == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// once makes one attempt.
func (c Check) once(ctx context.Context, client *http.Client) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if c.TCP != "" {
		conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", c.TCP)
		if err != nil {
			return err
		}
		return conn.Close()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.HTTP, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode >= 400 {
		return fmt.Errorf("GET %s: %s", c.HTTP, resp.Status)
	}
	return nil
}
