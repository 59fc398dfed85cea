package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/fastover/fastover/retrofit"
)

// installedAt is when fastover was installed, for the audit's reasons. A
// failure to read it (not allowed to read MutatingWebhookConfigurations,
// say) does not stop the audit, which needs only the pods: it is said on
// stderr, and the reasons do not guess why a pod was missed.
func installedAt(ctx context.Context, client kubernetes.Interface, stderr io.Writer) time.Time {
	at, err := retrofit.InstalledAt(ctx, client)
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "warning: %v; the reasons below do not say whether a pod predates fastover\n", err)
	}
	return at
}
