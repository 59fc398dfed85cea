// Package webhookreplica runs fastover-webhook processes as the pods of a
// Deployment behind a Service, on a local control plane without nodes:
// each Replica has an EndpointSlice of its own that a prober keeps as the
// kubelet's readiness probe and the EndpointSlice controller would, and
// that goes with the process. The API server (with
// --enable-aggregator-routing) resolves the Service to the ready ones, as
// kube-proxy would.
package webhookreplica
