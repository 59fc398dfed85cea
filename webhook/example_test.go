package webhook_test

import (
	"context"
	"fmt"

	"k8s.io/utils/ptr"

	"github.com/fastover/fastover/toleration"
	"github.com/fastover/fastover/webhook"
)

// Serving the webhook: certificates from a directory, reloaded when they
// change; metrics on :8080 and probes on :8081.
func ExampleNewServer() {
	rule := toleration.DefaultRule()
	rule.NotReadyTolerationSeconds = ptr.To[int64](0)
	srv, err := webhook.NewServer(webhook.Options{
		CertDir: "/tmp/k8s-webhook-server/serving-certs",
		Rule:    &rule,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = srv.Start(ctx) }()
}
