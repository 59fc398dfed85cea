// Package images tests fastover's container images as `make images`
// builds them (package internal/imagebuild): reproducible digests, and a
// push to and pull from a registry by digest. The images run for real in
// tests/e2e (images_test.go), with podman.
package images
