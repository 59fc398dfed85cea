package classify

import (
	"testing"
	tt "testing"
)

// Parallel: t.Parallel is the first statement.
func TestB(t *testing.T) {
	t.Parallel()
	t.Log("b")
}

// Serial: t.Parallel comes second.
func TestLate(t *testing.T) {
	t.Helper()
	t.Parallel()
}

// Serial: nothing first.
func TestEmpty(t *testing.T) {}

// Serial: another value's Parallel.
func TestOther(t *testing.T) {
	var other struct{ Parallel func() }
	other.Parallel()
}

// Not tests: a lower-case letter after Test, a benchmark, a method, a
// function of the wrong type.
func Testlower(t *testing.T)  { t.Parallel() }
func BenchmarkX(b *testing.B) {}

type s struct{}

func (s) TestMethod(t *testing.T) {}
func TestWrongType(t *tt.B)       {}
func TestTwo(a, b *testing.T)     {}
