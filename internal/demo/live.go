package demo

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"golang.org/x/term"
)

// printer writes the demo's output: whole lines, and one live status line
// that a terminal rewrites in place (\r) and other outputs (CI, a test's
// log) get at most every interval.
type printer struct {
	mu       sync.Mutex
	w        io.Writer
	tty      bool
	fd       int
	interval time.Duration // between status lines when not a terminal
	minTTY   time.Duration // between rewrites on a terminal
	last     time.Time     // of the last status written
	shown    bool          // a status line is on the terminal, unfinished
}

func newPrinter(w io.Writer, interval time.Duration) *printer {
	p := &printer{w: w, interval: interval, minTTY: 100 * time.Millisecond}
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		p.tty, p.fd = true, int(f.Fd())
	}
	return p
}

// Printf writes a whole line (a newline is added if missing), first
// clearing a live status line.
func (p *printer) Printf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clear()
	s := fmt.Sprintf(format, args...)
	if !strings.HasSuffix(s, "\n") {
		s += "\n"
	}
	_, _ = io.WriteString(p.w, s)
}

// Status shows the live status line: on a terminal it replaces the
// previous one (at most every 100ms); elsewhere it is printed as a line if
// the last one is older than the interval.
func (p *printer) Status(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if p.tty {
		if p.shown && now.Sub(p.last) < p.minTTY {
			return
		}
		p.last, p.shown = now, true
		_, _ = io.WriteString(p.w, "\r\033[K"+truncate(fmt.Sprintf(format, args...), p.width()-1))
		return
	}
	if !p.last.IsZero() && now.Sub(p.last) < p.interval {
		return
	}
	p.last = now
	_, _ = fmt.Fprintf(p.w, "    … "+format+"\n", args...)
}

// Reset makes the next Status line print at once.
func (p *printer) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.last = time.Time{}
}

// clear removes an unfinished status line from the terminal.
func (p *printer) clear() {
	if p.tty && p.shown {
		_, _ = io.WriteString(p.w, "\r\033[K")
		p.shown = false
	}
	p.last = time.Time{}
}

func (p *printer) width() int {
	if w, _, err := term.GetSize(p.fd); err == nil && w > 20 {
		return w
	}
	return 100
}

// truncate shortens s to at most n runes, marking the cut with "…".
func truncate(s string, n int) string {
	if n < 1 || utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}
