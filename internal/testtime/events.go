package testtime

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
)

// Event is one line of `go test -json` (cmd/test2json's TestEvent).
type Event struct {
	Time    time.Time `json:",omitempty"`
	Action  string
	Package string  `json:",omitempty"`
	Test    string  `json:",omitempty"`
	Elapsed float64 `json:",omitempty"` // seconds
	Output  string  `json:",omitempty"`
}

// maxLine bounds one line of the stream: a test that prints a longer line
// has it split by test2json anyway.
const maxLine = 4 << 20

// Tee copies the stream of `go test -json` from r to record, line for line,
// and writes to out the output the events carry, as `go test -v` would
// print it. When the stream holds more than one package, each output line
// is prefixed with its package (relative to module, when it has that
// prefix), since the packages' lines interleave; with prefix every line
// is, for a stream printed beside another. A line that is not an event (a
// go command's message) goes to out as it is. Tee returns when r ends.
func Tee(r io.Reader, out, record io.Writer, module string, prefix bool) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	packages := map[string]bool{}
	pending := map[string]string{} // a package's output line not ended yet
	for sc.Scan() {
		line := sc.Bytes()
		if _, err := record.Write(append(line, '\n')); err != nil {
			return fmt.Errorf("recording the events: %w", err)
		}
		var e Event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil || e.Action == "" {
			if _, err := fmt.Fprintf(out, "%s\n", line); err != nil {
				return err
			}
			continue
		}
		if e.Package != "" {
			packages[e.Package] = true
		}
		if e.Action != "output" && e.Action != "build-output" {
			continue
		}
		text := pending[e.Package] + e.Output
		lines := strings.SplitAfter(text, "\n")
		pending[e.Package] = lines[len(lines)-1]
		for _, l := range lines[:len(lines)-1] {
			if err := writeLine(out, l, e.Package, module, prefix || len(packages) > 1); err != nil {
				return err
			}
		}
	}
	for pkg, rest := range pending {
		if rest != "" {
			if err := writeLine(out, rest+"\n", pkg, module, prefix || len(packages) > 1); err != nil {
				return err
			}
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading the events: %w", err)
	}
	return nil
}

func writeLine(out io.Writer, line, pkg, module string, prefix bool) error {
	if prefix && pkg != "" {
		line = ShortName(pkg, module) + "| " + line
	}
	_, err := io.WriteString(out, line)
	return err
}

// ShortName is pkg relative to module ("." for the module's root package),
// or pkg itself outside module.
func ShortName(pkg, module string) string {
	if module == "" {
		return pkg
	}
	if pkg == module {
		return "."
	}
	if rest, ok := strings.CutPrefix(pkg, module+"/"); ok {
		return rest
	}
	return pkg
}
