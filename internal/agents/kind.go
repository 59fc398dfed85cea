package agents

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sort"
	"strings"
	"syscall"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// kindOf names the kind of a failed list or watch, for a table: what a
// thousand agents' errors have in common, without their addresses.
func kindOf(err error) string {
	var status apierrors.APIStatus
	var netErr net.Error
	switch {
	case err == nil:
		return "none"
	case apierrors.IsResourceExpired(err) || apierrors.IsGone(err):
		return "410 Gone"
	case errors.As(err, &status) && status.Status().Code != 0:
		return fmt.Sprintf("%d %s", status.Status().Code, status.Status().Reason)
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return "EOF"
	case errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &netErr) && netErr.Timeout()):
		return "timeout"
	}
	// client-go often flattens the cause into a message.
	msg := err.Error()
	for _, k := range []string{"connection refused", "connection reset", "EOF", "timeout", "no route to host", "http2"} {
		if strings.Contains(msg, k) {
			return k
		}
	}
	return "other"
}

// FormatKinds prints failure counts by kind, the most frequent first:
// "410 Gone 100, connection refused 12".
func FormatKinds(kinds map[string]int) string {
	if len(kinds) == 0 {
		return "none"
	}
	names := make([]string, 0, len(kinds))
	for k := range kinds {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool {
		if kinds[names[i]] != kinds[names[j]] {
			return kinds[names[i]] > kinds[names[j]]
		}
		return names[i] < names[j]
	})
	parts := make([]string, len(names))
	for i, k := range names {
		parts[i] = fmt.Sprintf("%s %d", k, kinds[k])
	}
	return strings.Join(parts, ", ")
}
