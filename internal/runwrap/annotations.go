package runwrap

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// The pod template annotations that ask for fastover-run and configure
// it. Only AnnotationLease is required.
const (
	// AnnotationLease names the Lease the replicas elect their leader
	// with (fastover-run --lease); a pod template with it is wrapped.
	AnnotationLease = "fastover.io/run-lease"
	// AnnotationService names the selector-less Service whose only
	// endpoint the leader becomes (--service); without it, election only.
	AnnotationService = "fastover.io/run-service"
	// AnnotationContainer names the container to wrap; it may be left out
	// when the pod has one container.
	AnnotationContainer = "fastover.io/run-container"
	// AnnotationReadyHTTP and AnnotationReadyTCP give COMMAND's readiness
	// check (--ready-http, --ready-tcp). Without either, the check is
	// taken from the container's readinessProbe (httpGet or tcpSocket)
	// when it has one, else COMMAND is ready once started.
	AnnotationReadyHTTP = "fastover.io/run-ready-http"
	AnnotationReadyTCP  = "fastover.io/run-ready-tcp"
)

// settings are a pod template's fastover-run annotations, checked.
type settings struct {
	lease, service, container, readyHTTP, readyTCP string
}

// Wanted reports whether a pod template's annotations ask for
// fastover-run.
func Wanted(annotations map[string]string) bool {
	_, ok := annotations[AnnotationLease]
	return ok
}

// parseSettings reads and checks the annotations; every problem is
// reported, each naming its annotation.
func parseSettings(a map[string]string) (settings, error) {
	s := settings{
		lease:     strings.TrimSpace(a[AnnotationLease]),
		service:   strings.TrimSpace(a[AnnotationService]),
		container: strings.TrimSpace(a[AnnotationContainer]),
		readyHTTP: strings.TrimSpace(a[AnnotationReadyHTTP]),
		readyTCP:  strings.TrimSpace(a[AnnotationReadyTCP]),
	}
	var problems []string
	for _, msg := range validation.IsDNS1123Subdomain(s.lease) {
		problems = append(problems, fmt.Sprintf("%s %q: %s", AnnotationLease, s.lease, msg))
	}
	if s.service != "" {
		for _, msg := range validation.IsDNS1035Label(s.service) {
			problems = append(problems, fmt.Sprintf("%s %q: %s", AnnotationService, s.service, msg))
		}
	}
	if s.readyHTTP != "" && s.readyTCP != "" {
		problems = append(problems, fmt.Sprintf("%s and %s: give one readiness check, not both", AnnotationReadyHTTP, AnnotationReadyTCP))
	}
	if s.readyHTTP != "" {
		if u, err := url.Parse(s.readyHTTP); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			problems = append(problems, fmt.Sprintf("%s %q: want an http:// or https:// URL such as http://127.0.0.1:8080/readyz", AnnotationReadyHTTP, s.readyHTTP))
		}
	}
	if s.readyTCP != "" {
		if _, port, err := net.SplitHostPort(s.readyTCP); err != nil || !validPort(port) {
			problems = append(problems, fmt.Sprintf("%s %q: want host:port such as 127.0.0.1:9000", AnnotationReadyTCP, s.readyTCP))
		}
	}
	if len(problems) > 0 {
		return s, fmt.Errorf("%s", strings.Join(problems, "; "))
	}
	return s, nil
}

func validPort(s string) bool {
	n, err := strconv.Atoi(s)
	return err == nil && n > 0 && n < 65536
}

// pickContainer returns the index of the container the settings name, or
// of the only one.
func pickContainer(spec *corev1.PodSpec, name string) (int, error) {
	if name == "" {
		if len(spec.Containers) != 1 {
			return -1, fmt.Errorf("the pod has %d containers: name the one to wrap with %s", len(spec.Containers), AnnotationContainer)
		}
		return 0, nil
	}
	for i := range spec.Containers {
		if spec.Containers[i].Name == name {
			return i, nil
		}
	}
	return -1, fmt.Errorf("%s %q: the pod has no such container", AnnotationContainer, name)
}
