// Package modproxy writes a Go module proxy into a directory: modules
// zipped from their source directories (golang.org/x/mod/zip, as a proxy
// serves them) under the GOPROXY protocol's paths, for a file:// URL at the
// head of GOPROXY. tests/modules uses it to fetch fastover's modules
// exactly as a consumer does, with `go get` and no replace directive.
package modproxy
