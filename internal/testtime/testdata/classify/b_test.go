package classify_test

import "testing"

// Parallel, in another file of the package's external tests; the name
// has a regexp meta character's neighbour.
func Test_A(t *testing.T) {
	t.Parallel()
}

// Serial.
func Test(t *testing.T) {}
