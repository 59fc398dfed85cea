package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/fastover/fastover/retrofit"
)

// installation is how fastover is installed (retrofit.DetectMode), for
// audit's report and reasons. A failure to read it (not allowed to read
// MutatingWebhookConfigurations or MutatingAdmissionPolicies, say) does
// not stop the audit, which needs only the pods: it is said on stderr,
// and the reasons do not guess why a pod was missed.
func installation(ctx context.Context, client kubernetes.Interface, stderr io.Writer) retrofit.Installation {
	inst, err := retrofit.DetectMode(ctx, client)
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "warning: %v; the reasons below do not say whether a pod predates fastover, and the mode may be wrong\n", err)
	}
	return inst
}

// installedAt is when fastover began to inject new pods, in either mode.
func installedAt(ctx context.Context, client kubernetes.Interface, stderr io.Writer) time.Time {
	return installation(ctx, client, stderr).InstalledAt()
}

// printInstallation says which mode audit found, first in its table.
func printInstallation(w io.Writer, inst *retrofit.Installation) error {
	if inst == nil {
		return nil
	}
	var what string
	switch inst.Mode {
	case retrofit.ModeWebhook:
		what = "webhook mode (MutatingWebhookConfiguration " + retrofit.WebhookConfiguration + ")"
	case retrofit.ModePolicy:
		what = "policy mode (MutatingAdmissionPolicy " + retrofit.PolicyName + ")"
	case retrofit.ModeBoth:
		what = "both modes (MutatingWebhookConfiguration " + retrofit.WebhookConfiguration + " and MutatingAdmissionPolicy " +
			retrofit.PolicyName + "; either alone applies the rule)"
	default:
		what = "neither mode: new pods are not injected"
	}
	_, err := fmt.Fprintf(w, "fastover: %s.\n", what)
	for _, n := range inst.Notes {
		if err == nil {
			_, err = fmt.Fprintf(w, "fastover: note: %s.\n", n)
		}
	}
	if err == nil {
		_, err = fmt.Fprintln(w)
	}
	return err
}
