package docs

import (
	"fmt"
	"regexp"
	"strings"
	"unicode"
)

// Document is a Markdown file as the checker sees it: its fenced code
// blocks, its links, its inline code spans and the anchors its headings
// make.
type Document struct {
	// Path is the file's path relative to the repository's root, with
	// forward slashes.
	Path    string
	Blocks  []CodeBlock
	Links   []Link
	Spans   []Span
	Anchors map[string]bool
}

// CodeBlock is a fenced code block.
type CodeBlock struct {
	// Lang is the info string's first word, lower case ("sh", "go", ...).
	Lang string
	// Line is the line of the block's first line of content (1-based).
	Line int
	// Text is the content, with the fence's indentation removed.
	Text string
	// Directive is the text of a <!-- docs: ... --> comment right before
	// the block, if any.
	Directive string
}

// Link is the target of a Markdown link, image, autolink or reference
// definition.
type Link struct {
	Target string
	Line   int
}

// Span is an inline code span.
type Span struct {
	Text string
	Line int
	// Directive is the text of a <!-- docs: ... --> comment right before
	// the paragraph or table the span is in, if any.
	Directive string
}

var (
	headingRE   = regexp.MustCompile(`^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$`)
	fenceRE     = regexp.MustCompile("^( *)(`{3,}|~{3,})\\s*([^`\\s]*)")
	directiveRE = regexp.MustCompile(`^\s*<!--\s*docs:\s*(.*?)\s*-->\s*$`)
	commentRE   = regexp.MustCompile(`^\s*<!--.*-->\s*$`)
	linkRE      = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)`)
	autolinkRE  = regexp.MustCompile(`<((?:https?|mailto):[^>\s]+)>`)
	refDefRE    = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$`)
	htmlIDRE    = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
)

// Parse reads a Markdown document. It understands what fastover's docs
// use: ATX headings, fenced code blocks (also indented inside lists),
// inline code spans (also across line breaks), inline links and images,
// autolinks and reference definitions.
func Parse(path, text string) *Document {
	d := &Document{Path: path, Anchors: map[string]bool{}}
	lines := strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n")
	slugs := map[string]int{}

	var (
		inFence    bool
		fence      string
		indent     int
		block      CodeBlock
		body       []string
		para       []string
		paraLine   int
		directive  string // applies to the next block or paragraph
		paraDirect string
	)
	flush := func() {
		if len(para) > 0 {
			d.scanParagraph(para, paraLine, paraDirect)
		}
		para, paraDirect = nil, ""
	}
	for i, line := range lines {
		n := i + 1
		if inFence {
			trimmed := strings.TrimSpace(line)
			if strings.HasPrefix(trimmed, fence) && strings.Trim(trimmed, fence[:1]) == "" {
				block.Text = strings.Join(body, "\n")
				d.Blocks = append(d.Blocks, block)
				inFence = false
				continue
			}
			body = append(body, dedent(line, indent))
			continue
		}
		if m := fenceRE.FindStringSubmatch(line); m != nil {
			flush()
			inFence, fence, indent = true, m[2], len(m[1])
			block = CodeBlock{Lang: strings.ToLower(m[3]), Line: n + 1, Directive: directive}
			body, directive = nil, ""
			continue
		}
		if m := directiveRE.FindStringSubmatch(line); m != nil {
			flush()
			directive = m[1]
			continue
		}
		if commentRE.MatchString(line) {
			continue
		}
		if strings.TrimSpace(line) == "" {
			flush()
			continue
		}
		if m := headingRE.FindStringSubmatch(line); m != nil {
			flush()
			slug := Slug(m[2])
			if k := slugs[slug]; k > 0 {
				d.Anchors[fmt.Sprintf("%s-%d", slug, k)] = true
			} else {
				d.Anchors[slug] = true
			}
			slugs[slug]++
			d.scanParagraph([]string{m[2]}, n, "")
			continue
		}
		if m := refDefRE.FindStringSubmatch(line); m != nil {
			d.Links = append(d.Links, Link{Target: m[1], Line: n})
			continue
		}
		for _, m := range htmlIDRE.FindAllStringSubmatch(line, -1) {
			d.Anchors[m[1]] = true
		}
		if len(para) == 0 {
			paraLine, paraDirect, directive = n, directive, ""
		}
		para = append(para, line)
	}
	flush()
	if inFence {
		block.Text = strings.Join(body, "\n")
		d.Blocks = append(d.Blocks, block)
	}
	return d
}

// dedent removes up to n leading spaces.
func dedent(line string, n int) string {
	i := 0
	for i < n && i < len(line) && line[i] == ' ' {
		i++
	}
	return line[i:]
}

// scanParagraph collects the code spans and links of a paragraph (or a
// table, a list item: consecutive non-blank lines).
func (d *Document) scanParagraph(lines []string, first int, directive string) {
	text := strings.Join(lines, "\n")
	lineAt := func(off int) int { return first + strings.Count(text[:off], "\n") }
	// Code spans: a run of n backticks up to the next run of exactly n.
	// Their text is blanked out before links are looked for.
	masked := []byte(text)
	for i := 0; i < len(text); {
		if text[i] != '`' {
			i++
			continue
		}
		j := i
		for j < len(text) && text[j] == '`' {
			j++
		}
		ticks := text[i:j]
		end := -1
		for k := j; k < len(text); {
			if text[k] != '`' {
				k++
				continue
			}
			l := k
			for l < len(text) && text[l] == '`' {
				l++
			}
			if l-k == len(ticks) {
				end = k
				break
			}
			k = l
		}
		if end < 0 {
			i = j
			continue
		}
		content := strings.ReplaceAll(text[j:end], "\n", " ")
		if strings.HasPrefix(content, " ") && strings.HasSuffix(content, " ") && strings.TrimSpace(content) != "" {
			content = content[1 : len(content)-1]
		}
		d.Spans = append(d.Spans, Span{Text: content, Line: lineAt(i), Directive: directive})
		for k := i; k < end+len(ticks); k++ {
			if masked[k] != '\n' {
				masked[k] = 'x'
			}
		}
		i = end + len(ticks)
	}
	m := string(masked)
	for _, loc := range linkRE.FindAllStringSubmatchIndex(m, -1) {
		d.Links = append(d.Links, Link{Target: m[loc[2]:loc[3]], Line: lineAt(loc[0])})
	}
	for _, loc := range autolinkRE.FindAllStringSubmatchIndex(m, -1) {
		d.Links = append(d.Links, Link{Target: m[loc[2]:loc[3]], Line: lineAt(loc[0])})
	}
}

var inlineLinkRE = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)

// Slug is the anchor GitHub gives a heading: the text without markup,
// lower case, with everything but letters, digits, spaces, hyphens and
// underscores removed, and spaces turned into hyphens.
func Slug(heading string) string {
	s := inlineLinkRE.ReplaceAllString(heading, "$1")
	s = strings.ToLower(s)
	var b strings.Builder
	for _, r := range s {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}
