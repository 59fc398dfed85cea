package agents

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestKindOf(t *testing.T) {
	gr := schema.GroupResource{Group: "example.fastover.io", Resource: "policies"}
	for want, err := range map[string]error{
		"none":                   nil,
		"410 Gone":               apierrors.NewResourceExpired("too old resource version: 5"),
		"503 ServiceUnavailable": apierrors.NewServiceUnavailable("not the leader"),
		"404 NotFound":           apierrors.NewNotFound(gr, "x"),
		"connection refused":     &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED},
		"connection reset":       fmt.Errorf("read: %w", syscall.ECONNRESET),
		"EOF":                    fmt.Errorf("list: %w", io.ErrUnexpectedEOF),
		"timeout":                context.DeadlineExceeded,
		"http2":                  errors.New("http2: client connection lost"),
		"other":                  errors.New("something else"),
	} {
		assert.Equal(t, want, kindOf(err), "%v", err)
	}
	assert.Equal(t, "410 Gone 3, EOF 1, connection refused 1", FormatKinds(map[string]int{"connection refused": 1, "410 Gone": 3, "EOF": 1}))
	assert.Equal(t, "none", FormatKinds(nil))
}
