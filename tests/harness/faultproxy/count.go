package faultproxy

import (
	"net/http"
	"strings"
)

// Request is the kind of one request the client made, as kube-apiserver
// would name it in its audit log: a verb (get, list, watch, create,
// update, patch, delete, deletecollection) and a resource ("leases",
// "endpointslices", "services/status"; "discovery" for /api, /apis and
// /version, "other" for anything else).
type Request struct {
	Verb, Resource string
}

func (r Request) String() string { return r.Verb + " " + r.Resource }

// Counts is what the client asked of the API server since the proxy
// started: requests by kind (watch opens included, as verb "watch"), and
// the watch streams open right now.
type Counts struct {
	Requests    map[Request]int
	OpenWatches int
}

// Total is the number of requests; NonWatch leaves watch opens out.
func (c Counts) Total() int {
	n := 0
	for _, v := range c.Requests {
		n += v
	}
	return n
}

// NonWatch is the number of requests other than watch opens.
func (c Counts) NonWatch() int { return c.Total() - c.Watches() }

// Watches is the number of watch streams opened.
func (c Counts) Watches() int {
	n := 0
	for k, v := range c.Requests {
		if k.Verb == "watch" {
			n += v
		}
	}
	return n
}

// Sub returns the requests made since an earlier snapshot; OpenWatches
// stays c's.
func (c Counts) Sub(earlier Counts) Counts {
	out := Counts{Requests: map[Request]int{}, OpenWatches: c.OpenWatches}
	for k, v := range c.Requests {
		if d := v - earlier.Requests[k]; d != 0 {
			out.Requests[k] = d
		}
	}
	return out
}

// Counts returns a snapshot of what the client has asked so far.
func (p *Proxy) Counts() Counts {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := Counts{Requests: make(map[Request]int, len(p.requests)), OpenWatches: p.openWatches}
	for k, v := range p.requests {
		out.Requests[k] = v
	}
	return out
}

// count records a request as it arrives; the function it returns marks
// its end (for watches: the stream closed).
func (p *Proxy) count(r *http.Request) func() {
	kind := Classify(r)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.requests == nil {
		p.requests = map[Request]int{}
	}
	p.requests[kind]++
	if kind.Verb != "watch" {
		return func() {}
	}
	p.openWatches++
	return func() {
		p.mu.Lock()
		p.openWatches--
		p.mu.Unlock()
	}
}

// Classify names a request to kube-apiserver by verb and resource.
func Classify(r *http.Request) Request {
	path := strings.Trim(r.URL.Path, "/")
	parts := strings.Split(path, "/")
	var rest []string
	switch {
	case path == "api" || path == "apis" || path == "version" || strings.HasPrefix(path, "openapi"):
		return Request{verbOf(r, false, false), "discovery"}
	case parts[0] == "api" && len(parts) >= 2: // api/v1/...
		rest = parts[2:]
	case parts[0] == "apis" && len(parts) >= 3: // apis/group/version/...
		rest = parts[3:]
	case parts[0] == "apis" || parts[0] == "api":
		return Request{verbOf(r, false, false), "discovery"}
	default:
		return Request{verbOf(r, false, false), "other"}
	}
	if len(rest) == 0 {
		return Request{verbOf(r, false, false), "discovery"}
	}
	pathWatch := false
	if rest[0] == "watch" { // the old /watch/ paths
		pathWatch = true
		rest = rest[1:]
	}
	// namespaces/NS/RESOURCE[/NAME[/SUB]] or RESOURCE[/NAME[/SUB]];
	// "namespaces" alone or namespaces/NAME is the namespace itself.
	if len(rest) >= 3 && rest[0] == "namespaces" {
		rest = rest[2:]
	}
	if len(rest) == 0 {
		return Request{verbOf(r, false, pathWatch), "other"}
	}
	resource := rest[0]
	named := len(rest) >= 2
	if len(rest) >= 3 {
		resource += "/" + rest[2]
	}
	return Request{verbOf(r, named, pathWatch), resource}
}

func verbOf(r *http.Request, named, pathWatch bool) string {
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		switch {
		case pathWatch || isWatch(r):
			return "watch"
		case named:
			return "get"
		default:
			return "list"
		}
	case http.MethodPost:
		return "create"
	case http.MethodPut:
		return "update"
	case http.MethodPatch:
		return "patch"
	case http.MethodDelete:
		if named {
			return "delete"
		}
		return "deletecollection"
	default:
		return strings.ToLower(r.Method)
	}
}
