package demo

import (
	"cmp"
	"encoding/xml"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"
)

// The picture's geometry, in pixels.
const (
	svgWidth   = 1000
	svgMargin  = 20
	plotLeft   = 150 // where the time axes start
	plotRight  = svgWidth - 40
	plotWidth  = plotRight - plotLeft
	eventRow   = 17 // between two events of a timeline
	laneGap    = 16
	fontFamily = "system-ui, -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif"

	colorFastover = "#1f9e89"
	colorDefault  = "#e0703a"
	colorText     = "#1d2330"
	colorMuted    = "#5b6473"
	colorFail     = "#c62828"
	colorOld      = "#8a96a8"
	colorStandby  = "#6a1b9a"
	colorSilent   = "#dde2ea"

	clientRow   = 16 // between two client strips
	clientStrip = 10 // a client strip's height
)

// outcomeColor is the color of a client's calls with the outcome.
func outcomeColor(o Outcome) string {
	switch o {
	case FromOld:
		return colorOld
	case Failed:
		return colorFail
	case FromNew:
		return colorFastover
	case Silent:
		return colorSilent
	}
	return colorStandby
}

// clientsLegendX is where the clients' legend starts.
const clientsLegendX = svgMargin + 100

// legendLabel is the clients' legend for an outcome.
func legendLabel(o Outcome) string {
	switch o {
	case Failed:
		return "failed, watch error"
	case FromStandby:
		return "a standby (never)"
	case Silent:
		return "watch silent"
	}
	return o.String() + " answers"
}

// WriteSVG writes the summary's timeline as an SVG picture, atomically
// (the file is replaced only once complete). Each scenario is a lane: its
// name and result, fastover's time against Kubernetes' default as bars,
// and fastover's timeline, the events marked on a time axis of its own.
func WriteSVG(path string, s *Summary) error {
	data := RenderSVG(s)
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(f.Name()) }() // after the rename: nothing
	if _, err := f.WriteString(data); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Chmod(0o644); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// RenderSVG returns the picture WriteSVG writes.
func RenderSVG(s *Summary) string {
	var body strings.Builder
	y := 0.0
	var b svgBuilder
	b.w = &body

	// Title, what ran, and the legend.
	y += 36
	b.text(svgMargin, y, 21, "bold", colorText, "start", "fastover: what it changes, measured on a real local control plane")
	y += 22
	var what []string
	if s.KubernetesVersion != "" {
		what = append(what, "Kubernetes "+s.KubernetesVersion)
	}
	what = append(what,
		cmp.Or(s.Platform, fmt.Sprintf("%d nodes", len(s.Nodes))),
		"node-monitor grace period "+FormatDuration(s.Grace),
		fmt.Sprintf("leader election %v/%v/%v", s.LeaseDuration, s.RenewDeadline, s.RetryPeriod))
	if !s.Started.IsZero() {
		what = append(what, s.Started.UTC().Format("2006-01-02"))
	}
	b.text(svgMargin, y, 13, "normal", colorMuted, "start", strings.Join(what, " · "))
	y += 24
	b.rect(svgMargin, y-10, 12, 12, colorFastover, 1)
	b.text(svgMargin+18, y, 13, "normal", colorText, "start", "with fastover (measured)")
	b.rect(svgMargin+200, y-10, 12, 12, colorDefault, 1)
	b.text(svgMargin+218, y, 13, "normal", colorText, "start", "Kubernetes default it replaces")
	b.text(plotRight, y, 12, "normal", colorMuted, "end", "each scenario has time axes of its own")
	if hasClients(s) {
		// The client strips' legend.
		y += 20
		b.text(svgMargin, y, 13, "normal", colorText, "start", "real clients:")
		x := float64(clientsLegendX)
		outcomes := []Outcome{FromOld, Failed, FromNew, FromStandby}
		if hasStreams(s) {
			outcomes = append(outcomes, Silent)
		}
		for _, o := range outcomes {
			b.rect(x, y-10, 12, 12, outcomeColor(o), 1)
			label := legendLabel(o)
			b.text(x+18, y, 13, "normal", colorText, "start", label)
			x += 18 + textWidth(label, 13) + 22
		}
	}
	y += 18

	for i, r := range s.Results {
		y += laneGap
		y = b.lane(y, i+1, r)
	}
	y += 30
	b.text(svgMargin, y, 11, "normal", colorMuted, "start",
		"Written by `make demo` (internal/demo): every time is measured on this run, except the defaults, derived from what ran (see the summary table).")
	y += 14

	var out strings.Builder
	fmt.Fprintf(&out, `<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%.0f" viewBox="0 0 %d %.0f" font-family="%s">
<title>fastover demo timeline</title>
<defs><linearGradient id="never"><stop offset="0" stop-color="%s"/><stop offset="1" stop-color="%s" stop-opacity="0.1"/></linearGradient></defs>
<rect x="0" y="0" width="%d" height="%.0f" fill="#ffffff"/>
`, svgWidth, y, svgWidth, y, fontFamily, colorDefault, colorDefault, svgWidth, y)
	out.WriteString(body.String())
	out.WriteString("</svg>\n")
	return out.String()
}

type svgBuilder struct{ w *strings.Builder }

func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

func (b *svgBuilder) text(x, y, size float64, weight, fill, anchor, s string) {
	fmt.Fprintf(b.w, `<text x="%.1f" y="%.1f" font-size="%.0f" font-weight="%s" fill="%s" text-anchor="%s">%s</text>`+"\n",
		x, y, size, weight, fill, anchor, esc(s))
}

// label is text with a halo of the lane's background, readable across the
// lines it crosses.
func (b *svgBuilder) label(x, y float64, anchor, s string) {
	fmt.Fprintf(b.w, `<text x="%.1f" y="%.1f" font-size="12" fill="%s" text-anchor="%s" paint-order="stroke" stroke="#f4f6f8" stroke-width="4" stroke-linejoin="round">%s</text>`+"\n",
		x, y, colorText, anchor, esc(s))
}

func (b *svgBuilder) rect(x, y, w, h float64, fill string, opacity float64) {
	fmt.Fprintf(b.w, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" rx="2" fill="%s" fill-opacity="%.2f"/>`+"\n", x, y, w, h, fill, opacity)
}

func (b *svgBuilder) line(x1, y1, x2, y2 float64, stroke string, width float64, dash string) {
	d := ""
	if dash != "" {
		d = fmt.Sprintf(` stroke-dasharray="%s"`, dash)
	}
	fmt.Fprintf(b.w, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="%.1f"%s/>`+"\n", x1, y1, x2, y2, stroke, width, d)
}

// lane draws one scenario from y, on a background, and returns where it
// ends.
func (b *svgBuilder) lane(y float64, n int, r Result) float64 {
	var inner strings.Builder
	end := (&svgBuilder{w: &inner}).laneContent(y, n, r)
	fmt.Fprintf(b.w, `<rect x="%d" y="%.1f" width="%d" height="%.1f" rx="8" fill="#f4f6f8" stroke="#dde1e6"/>`+"\n",
		svgMargin, y, svgWidth-2*svgMargin, end-y)
	b.w.WriteString(inner.String())
	return end
}

func (b *svgBuilder) laneContent(y float64, n int, r Result) float64 {

	y += 24
	b.text(svgMargin+12, y, 16, "bold", colorText, "start", fmt.Sprintf("%d. %s", n, r.Name))
	verdict, color := "✔ passed", colorFastover
	if !r.Passed {
		verdict, color = "✘ FAILED", colorFail
	} else if x := speedup(r); x != "" {
		verdict = x + " · " + verdict
	}
	b.text(plotRight, y, 14, "bold", color, "end", verdict)

	// fastover against the default, on one scale.
	scale := max(r.Baseline.Upto, r.Fastover)
	if scale <= 0 {
		scale = time.Second
	}
	barW := func(d time.Duration) float64 {
		w := float64(plotWidth) * 0.8 * d.Seconds() / scale.Seconds()
		return math.Max(w, 2)
	}
	y += 14
	b.text(plotLeft-10, y+12, 13, "normal", colorText, "end", "with fastover")
	if r.Passed {
		w := barW(r.Fastover)
		b.rect(plotLeft, y, w, 16, colorFastover, 1)
		label := FormatDuration(r.Fastover) + ": " + r.Measured
		if plotLeft+w+6+textWidth(label, 13) > plotRight && w > textWidth(label, 13)+12 {
			b.text(plotLeft+w-6, y+12.5, 13, "bold", "#ffffff", "end", label)
		} else {
			b.text(plotLeft+w+6, y+12.5, 13, "bold", colorText, "start", label)
		}
	} else {
		b.text(plotLeft, y+12.5, 13, "bold", colorFail, "start", "failed: "+r.Error)
	}
	y += 22
	b.text(plotLeft-10, y+12, 13, "normal", colorText, "end", "Kubernetes")
	switch {
	case r.Baseline.Never:
		w := float64(plotWidth) * 0.8
		// Fading out: it never ends.
		fmt.Fprintf(b.w, `<rect x="%d" y="%.1f" width="%.1f" height="16" rx="2" fill="url(#never)"/>`+"\n", plotLeft, y, w)
		b.text(plotLeft+w+6, y+12.5, 13, "bold", colorText, "start", "never →")
	case r.Baseline.From == 0 || r.Baseline.From == r.Baseline.Upto:
		w := barW(r.Baseline.Upto)
		b.rect(plotLeft, y, w, 16, colorDefault, 1)
		b.text(plotLeft+w+6, y+12.5, 13, "bold", colorText, "start", r.Baseline.String())
	default:
		from, upto := barW(r.Baseline.From), barW(r.Baseline.Upto)
		b.rect(plotLeft, y, from, 16, colorDefault, 1)
		b.rect(plotLeft+from, y, upto-from, 16, colorDefault, 0.45)
		b.text(plotLeft+upto+6, y+12.5, 13, "bold", colorText, "start", r.Baseline.String())
	}
	y += 16
	for _, line := range wrap("without fastover: "+r.Baseline.Why, 128) {
		y += 15
		b.text(plotLeft, y, 12, "normal", colorMuted, "start", line)
	}

	// fastover's timeline, on its own scale.
	if len(r.Events) > 0 {
		y += 26
		b.text(plotLeft-10, y, 13, "normal", colorText, "end", "timeline")
		span := r.Fastover
		for _, e := range r.Events {
			span = max(span, e.At)
		}
		for _, c := range r.Clients {
			span = max(span, c.Gap)
		}
		step, end := niceAxis(span)
		x := func(d time.Duration) float64 {
			return plotLeft + float64(plotWidth)*d.Seconds()/end.Seconds()
		}
		spanY := y + float64(len(r.Events)-1)*eventRow + 12
		if len(r.Spans) > 0 { // a row of their own, above the axis
			spanY += eventRow
		}
		// The client strips, between the spans and the axis.
		axisY := spanY
		if len(r.Clients) > 0 {
			axisY += 4 + float64(len(r.Clients))*clientRow
		}
		for _, sp := range r.Spans {
			x0, x1 := x(sp.From), x(min(sp.To, end))
			b.rect(x0, spanY-6, max(x1-x0, 1), 6, colorMuted, 0.25)
			b.label((x0+x1)/2, spanY-10, "middle", sp.What)
		}
		for i, e := range r.Events {
			ey := y + float64(i)*eventRow
			ex := x(e.At)
			b.line(ex, ey, ex, axisY, colorMuted, 0.8, "2,3")
			fmt.Fprintf(b.w, `<circle cx="%.1f" cy="%.1f" r="4" fill="%s"/>`+"\n", ex, ey-4, colorFastover)
			label := FormatDuration(e.At) + "  " + e.What
			if ex < plotLeft+plotWidth*0.55 {
				b.label(ex+8, ey, "start", label)
			} else {
				b.label(ex-8, ey, "end", label)
			}
		}
		for i, c := range r.Clients {
			b.clientStrip(spanY+4+float64(i)*clientRow, c, x, end)
		}
		b.line(plotLeft, axisY, plotRight, axisY, colorText, 1, "")
		for t := time.Duration(0); t <= end; t += step {
			tx := x(t)
			b.line(tx, axisY, tx, axisY+5, colorText, 1, "")
			b.text(tx, axisY+18, 11, "normal", colorMuted, "middle", tickLabel(t, step))
		}
		y = axisY + 24
	}
	return y + 12
}

// clientStrip draws a real client's calls at y, on the timeline's scale
// x up to end: the outcomes as colored stretches, the first answer from
// the new leader marked with its time.
func (b *svgBuilder) clientStrip(y float64, c ClientLane, x func(time.Duration) float64, end time.Duration) {
	// "via kube-apiserver" fits the margin; the title has the rest.
	b.text(plotLeft-10, y+clientStrip-1, 11, "normal", colorText, "end", strings.Replace(c.Name, "through ", "via ", 1))
	fmt.Fprintf(b.w, `<g><title>%s</title>`+"\n", esc("client "+c.Name+": "+c.Via+": "+c.Verdict()))
	for _, sg := range c.Segments {
		from, to := max(sg.From, 0), min(sg.To, end)
		if to <= from {
			continue
		}
		b.rect(x(from), y, max(x(to)-x(from), 1), clientStrip, outcomeColor(sg.Outcome), 1)
	}
	b.w.WriteString("</g>\n")
	if c.Gap > 0 {
		gx := x(c.Gap)
		b.line(gx, y-2, gx, y+clientStrip+2, colorText, 1.5, "")
		label := formatFine(c.Gap)
		if !c.Passed {
			label += ": " + c.Error
		}
		if gx < plotLeft+plotWidth*0.8 {
			b.label(gx+5, y+clientStrip-1, "start", label)
		} else {
			b.label(gx-5, y+clientStrip-1, "end", label)
		}
	} else if !c.Passed {
		b.label(plotLeft+4, y+clientStrip-1, "start", "FAILED: "+c.Error)
	}
}

// hasClients reports whether a scenario has client lanes.
func hasClients(s *Summary) bool {
	for _, r := range s.Results {
		if len(r.Clients) > 0 {
			return true
		}
	}
	return false
}

// hasStreams reports whether a scenario has a lane of a client that
// watches.
func hasStreams(s *Summary) bool {
	for _, r := range s.Results {
		for _, c := range r.Clients {
			if c.Stream {
				return true
			}
		}
	}
	return false
}

// speedup compares fastover's time with the default's lower bound: "32×
// faster", or "" when that is not clearly more.
func speedup(r Result) string {
	if r.Fastover <= 0 || r.Baseline.Never || r.Baseline.From <= 0 {
		return ""
	}
	switch f := r.Baseline.From.Seconds() / r.Fastover.Seconds(); {
	case f >= 10:
		return fmt.Sprintf("%.0f× faster", f)
	case f >= 1.1:
		return fmt.Sprintf("%.1f× faster", f)
	}
	return ""
}

// niceAxis returns a tick step of 1, 2 or 5 times a power of ten, about 8
// ticks, and the axis end, a multiple of it at least span.
func niceAxis(span time.Duration) (step, end time.Duration) {
	if span <= 0 {
		span = time.Second
	}
	raw := span.Seconds() / 8
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	s := mag
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw {
			s = m * mag
			break
		}
	}
	step = time.Duration(s * float64(time.Second))
	if step < time.Millisecond {
		step = time.Millisecond
	}
	end = time.Duration(math.Ceil(span.Seconds()/step.Seconds())) * step
	if end < span {
		end += step
	}
	return step, end
}

// tickLabel formats a tick for its axis's step: "0", "20 ms", "1.5 s",
// "30 s", "2 min".
func tickLabel(t, step time.Duration) string {
	switch {
	case t == 0:
		return "0"
	case step < time.Second:
		if t < time.Second {
			return fmt.Sprintf("%d ms", t/time.Millisecond)
		}
		return trimZero(fmt.Sprintf("%.3f", t.Seconds())) + " s"
	case t%time.Minute == 0 && step >= 30*time.Second:
		return fmt.Sprintf("%d min", t/time.Minute)
	default:
		return trimZero(fmt.Sprintf("%.1f", t.Seconds())) + " s"
	}
}

// textWidth estimates the width of s in a sans-serif font of the size.
func textWidth(s string, size float64) float64 {
	return float64(utf8.RuneCountInString(s)) * size * 0.56
}

// wrap breaks s into lines of at most n runes, at spaces.
func wrap(s string, n int) []string {
	var lines []string
	var cur []string
	length := 0
	for _, w := range strings.Fields(s) {
		wl := utf8.RuneCountInString(w)
		if length > 0 && length+1+wl > n {
			lines = append(lines, strings.Join(cur, " "))
			cur, length = nil, 0
		}
		if length > 0 {
			length++
		}
		cur = append(cur, w)
		length += wl
	}
	if len(cur) > 0 {
		lines = append(lines, strings.Join(cur, " "))
	}
	return lines
}
