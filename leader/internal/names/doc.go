// Package names holds the names the leader's EndpointSlice carries, shared
// by the package that writes it (leader) and the one that reads it
// (leader/follow), so that neither imports the other.
package names
