package runwrap

import (
	"bytes"
	"os"
	"testing"

	"sigs.k8s.io/kustomize/kyaml/kio"
)

// FuzzManifests: any input gives an error or manifests that read back,
// and wrapping them again changes nothing.
func FuzzManifests(f *testing.F) {
	seed, err := os.ReadFile("testdata/netexec.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add([]byte("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {template: {metadata: {annotations: {fastover.io/run-lease: x}}}}\n"))
	f.Add([]byte("kind: ResourceList\nitems: [{apiVersion: v1, kind: Service, metadata: {name: s}}]\n"))
	opts := ManifestOptions{Options: Options{Image: testImage}}
	f.Fuzz(func(t *testing.T, data []byte) {
		nodes, err := (&kio.ByteReader{Reader: bytes.NewReader(data), OmitReaderAnnotations: true}).Read()
		if err != nil {
			return
		}
		out, _, err := Manifests(nodes, opts)
		if err != nil {
			return
		}
		var first bytes.Buffer
		if err := (kio.ByteWriter{Writer: &first}).Write(out); err != nil {
			return // kyaml cannot write some nodes it read; not ours
		}
		again, err := (&kio.ByteReader{Reader: bytes.NewReader(first.Bytes()), OmitReaderAnnotations: true}).Read()
		if err != nil {
			t.Fatalf("wrapped output does not read back: %v\n%s", err, first.String())
		}
		// What the output is once kyaml has read and written it, which is
		// not always the same text (it moves some comments): the second
		// wrap must give exactly this.
		var reread bytes.Buffer
		if err := (kio.ByteWriter{Writer: &reread}).Write(again); err != nil {
			t.Fatal(err)
		}
		out2, done, err := Manifests(again, opts)
		if err != nil {
			t.Fatalf("wrapping the output again: %v\n%s", err, first.String())
		}
		if len(done) > 0 {
			t.Fatalf("wrapped twice: %v\n%s", done, first.String())
		}
		var second bytes.Buffer
		if err := (kio.ByteWriter{Writer: &second}).Write(out2); err != nil {
			t.Fatal(err)
		}
		if reread.String() != second.String() {
			t.Fatalf("not idempotent:\n%s\n---\n%s", reread.String(), second.String())
		}
	})
}
