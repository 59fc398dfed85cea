// Command antrealike is a controller on client-go v0.35, as a project one
// Kubernetes minor behind writes it: the consumer that tests/modules turns
// into an active/standby one with fastover's leader library (elect.go, added
// after `go get`). It takes the flags internal/fleet gives a replica, serves
// its identity on GET / and, while it leads, counts the Pods of its
// namespace every second.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

type options struct {
	namespace, service, lease, id, address string
	leaseDuration, renewDeadline, retry    time.Duration
}

func main() {
	var o options
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig file")
	listen := flag.String("listen", "127.0.0.1:8080", "address to serve GET / on")
	flag.StringVar(&o.namespace, "namespace", "default", "namespace of the Lease and the Service")
	flag.StringVar(&o.service, "service", "", "the Service to publish the leader in")
	flag.StringVar(&o.lease, "lease", "antrealike", "the Lease's name")
	flag.StringVar(&o.id, "id", "", "identity")
	flag.StringVar(&o.address, "address", "", "the address to publish")
	flag.Int("port", 0, "the port the Service's targetPort names (unused: the Service's own ports are published)")
	flag.DurationVar(&o.leaseDuration, "lease-duration", 15*time.Second, "lease duration")
	flag.DurationVar(&o.renewDeadline, "renew-deadline", 10*time.Second, "renew deadline")
	flag.DurationVar(&o.retry, "retry-period", 2*time.Second, "retry period")
	flag.Parse()

	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		log.Fatal(err)
	}
	clientset, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		log.Fatal(err)
	}
	http.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, o.id) })
	go func() { log.Fatal(http.ListenAndServe(*listen, nil)) }()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := elect(ctx, clientset, o); err != nil {
		log.Fatal(err)
	}
}

// work is the controller's job: it runs until ctx ends.
func work(ctx context.Context, clientset kubernetes.Interface, namespace string) error {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		pods, err := clientset.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
		if err == nil {
			log.Printf("leading: %d pods in %s", len(pods.Items), namespace)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
