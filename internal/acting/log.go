package acting

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// Term is one replica's term as the leader, as it logged it.
type Term struct {
	ID          string    // the replica's identity
	N           int       // the term (the Lease's transitions)
	Start, Last time.Time // its start, and its last action
	Acts        int       // actions logged
	Stop        string    // Run's error as logged ("nil" for none); "" if the process died first
	StopAt      time.Time
}

// Parse reads an acting log, whose lines are
//
//	<unix ns> <identity> start <term>
//	<unix ns> <identity> act
//	<unix ns> <identity> stop <Run's error>
//
// and returns the terms in the order they started. A line it cannot read
// is an error naming it; an act or a stop outside a term is ignored (a
// term's start lost with a truncated file).
func Parse(r io.Reader) ([]*Term, error) {
	open := map[string]*Term{}
	var terms []*Term
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		fields := strings.SplitN(sc.Text(), " ", 4)
		if len(fields) < 3 {
			return terms, fmt.Errorf("acting log, line %d: %q: want <unix ns> <identity> start, act or stop", line, sc.Text())
		}
		ns, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return terms, fmt.Errorf("acting log, line %d: %q: the time: %w", line, sc.Text(), err)
		}
		at, id := time.Unix(0, ns), fields[1]
		switch fields[2] {
		case "start":
			n := 0
			if len(fields) == 4 {
				if n, err = strconv.Atoi(fields[3]); err != nil {
					return terms, fmt.Errorf("acting log, line %d: %q: the term: %w", line, sc.Text(), err)
				}
			}
			tm := &Term{ID: id, N: n, Start: at, Last: at}
			open[id] = tm
			terms = append(terms, tm)
		case "act":
			if tm := open[id]; tm != nil {
				tm.Last, tm.Acts = at, tm.Acts+1
			}
		case "stop":
			if tm := open[id]; tm != nil {
				tm.Stop, tm.StopAt = "nil", at
				if len(fields) == 4 {
					tm.Stop = fields[3]
				}
				delete(open, id)
			}
		default:
			return terms, fmt.Errorf("acting log, line %d: %q: want start, act or stop", line, sc.Text())
		}
	}
	return terms, sc.Err()
}

// Overlaps returns, for each pair of terms whose actions interleave (two
// leaders acting at once), a sentence that says who and when; none if
// the terms never overlapped.
func Overlaps(terms []*Term) []string {
	var out []string
	for _, p := range OverlappingPairs(terms) {
		out = append(out, Describe(p))
	}
	return out
}

// OverlappingPairs returns the pairs of terms whose actions interleave.
func OverlappingPairs(terms []*Term) [][2]*Term {
	var out [][2]*Term
	for i, a := range terms {
		for _, b := range terms[i+1:] {
			if a.Acts > 0 && b.Acts > 0 && a.Start.Before(b.Last) && b.Start.Before(a.Last) {
				out = append(out, [2]*Term{a, b})
			}
		}
	}
	return out
}

// Describe says who of an overlapping pair acted when.
func Describe(p [2]*Term) string {
	a, b := p[0], p[1]
	return fmt.Sprintf("two leaders acted at once: %s (term %d) %s–%s and %s (term %d) %s–%s",
		a.ID, a.N, a.Start.Format(time.StampMicro), a.Last.Format(time.StampMicro),
		b.ID, b.N, b.Start.Format(time.StampMicro), b.Last.Format(time.StampMicro))
}
