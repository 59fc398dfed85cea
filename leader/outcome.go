package leader

import (
	"errors"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// outcomeUnknown reports whether a failed write may all the same have been
// applied by the API server: the request got no answer (its context was
// cancelled or timed out, the connection broke) or the server answered
// that it gave up waiting. Such a write must be learned from a read before
// anything is based on it: a renewal cancelled by SIGTERM on its way back
// has usually been applied, and a write from the version before it then
// conflicts.
func outcomeUnknown(err error) bool {
	if err == nil {
		return false
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return true
	}
	return apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err) ||
		apierrors.IsInternalError(err) || apierrors.IsUnexpectedServerError(err)
}
