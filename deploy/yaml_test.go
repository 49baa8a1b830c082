package deploy

import (
	"fmt"
	"strings"
)

// The module has no YAML library, and the deploy files do not justify one:
// parseYAML reads the block-style subset they are written in and refuses
// everything else loudly, so a file that drifts out of the subset fails the
// test instead of being misread.
//
// Supported: documents separated by "---"; block mappings and block
// sequences (a sequence may sit at its key's indentation); "- key: value"
// items; plain, 'single' and "double" quoted scalars; the empty flow
// collections [] and {}; full-line and trailing " #" comments.
// Refused: tabs in indentation, block scalars (| >), anchors, aliases,
// tags, merge keys, non-empty flow collections, duplicate keys.
//
// Every scalar is a string (no type resolution); mappings are
// map[string]any, sequences []any, a key without a value is nil.

type yamlLine struct {
	num    int // 1-based line number in the file
	indent int
	text   string // without indentation and comment
}

// parseYAML returns the documents of a YAML stream.
func parseYAML(src string) ([]any, error) {
	var docs []any
	var cur []yamlLine
	flush := func() error {
		if len(cur) == 0 {
			return nil
		}
		p := &yamlParser{lines: cur}
		v, err := p.block(cur[0].indent)
		if err != nil {
			return err
		}
		if p.pos != len(p.lines) {
			l := p.lines[p.pos]
			return fmt.Errorf("line %d: unexpected indentation", l.num)
		}
		docs = append(docs, v)
		cur = nil
		return nil
	}
	for i, raw := range strings.Split(src, "\n") {
		raw = strings.TrimRight(raw, " \r")
		if raw == "---" {
			if err := flush(); err != nil {
				return nil, err
			}
			continue
		}
		trimmed := strings.TrimLeft(raw, " ")
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		if strings.HasPrefix(trimmed, "\t") {
			return nil, fmt.Errorf("line %d: tab in indentation", i+1)
		}
		text, err := stripComment(trimmed)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", i+1, err)
		}
		cur = append(cur, yamlLine{num: i + 1, indent: len(raw) - len(trimmed), text: text})
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return docs, nil
}

// stripComment removes a trailing " #" comment outside quotes.
func stripComment(s string) (string, error) {
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == '\\' && quote == '"' {
				i++
			} else if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'':
			// A quote opens a quoted scalar only at the start of a value.
			if i == 0 || s[i-1] == ' ' {
				quote = c
			}
		case c == '#' && i > 0 && s[i-1] == ' ':
			return strings.TrimRight(s[:i], " "), nil
		}
	}
	if quote != 0 {
		return "", fmt.Errorf("unterminated quoted scalar")
	}
	return s, nil
}

type yamlParser struct {
	lines []yamlLine
	pos   int
}

// block parses the mapping or sequence whose lines start at indent.
func (p *yamlParser) block(indent int) (any, error) {
	if p.pos >= len(p.lines) {
		return nil, nil
	}
	l := p.lines[p.pos]
	if l.indent != indent {
		return nil, fmt.Errorf("line %d: want indentation %d, have %d", l.num, indent, l.indent)
	}
	if isSeqItem(l.text) {
		return p.sequence(indent)
	}
	return p.mapping(indent, nil)
}

func isSeqItem(s string) bool { return s == "-" || strings.HasPrefix(s, "- ") }

func (p *yamlParser) sequence(indent int) (any, error) {
	out := []any{}
	for p.pos < len(p.lines) {
		l := p.lines[p.pos]
		if l.indent < indent {
			break
		}
		if l.indent > indent || !isSeqItem(l.text) {
			return nil, fmt.Errorf("line %d: expected a sequence item at indentation %d", l.num, indent)
		}
		rest := strings.TrimLeft(strings.TrimPrefix(l.text, "-"), " ")
		p.pos++
		if rest == "" {
			// "-" alone: the item is the nested block below.
			if p.pos < len(p.lines) && p.lines[p.pos].indent > indent {
				v, err := p.block(p.lines[p.pos].indent)
				if err != nil {
					return nil, err
				}
				out = append(out, v)
			} else {
				out = append(out, nil)
			}
			continue
		}
		itemIndent := indent + (len(l.text) - len(rest))
		if key, val, ok, err := splitKey(rest, l.num); err != nil {
			return nil, err
		} else if ok {
			// "- key: value": a mapping whose further keys are at itemIndent.
			first := yamlLine{num: l.num, indent: itemIndent, text: key + ": " + val}
			if val == "" {
				first.text = key + ":"
			}
			m, err := p.mapping(itemIndent, &first)
			if err != nil {
				return nil, err
			}
			out = append(out, m)
			continue
		}
		v, err := scalar(rest, l.num)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// mapping parses a block mapping at indent; first, if set, is its first
// line already consumed (the "- key: value" of a sequence item).
func (p *yamlParser) mapping(indent int, first *yamlLine) (any, error) {
	out := map[string]any{}
	next := func() (yamlLine, bool) {
		if first != nil {
			l := *first
			first = nil
			return l, true
		}
		if p.pos >= len(p.lines) {
			return yamlLine{}, false
		}
		l := p.lines[p.pos]
		if l.indent < indent {
			return yamlLine{}, false
		}
		p.pos++
		return l, true
	}
	for {
		l, ok := next()
		if !ok {
			return out, nil
		}
		if l.indent != indent {
			return nil, fmt.Errorf("line %d: want indentation %d, have %d", l.num, indent, l.indent)
		}
		key, val, ok, err := splitKey(l.text, l.num)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fmt.Errorf("line %d: expected \"key: value\", have %q", l.num, l.text)
		}
		if _, dup := out[key]; dup {
			return nil, fmt.Errorf("line %d: duplicate key %q", l.num, key)
		}
		if val != "" {
			v, err := scalar(val, l.num)
			if err != nil {
				return nil, err
			}
			out[key] = v
			continue
		}
		// "key:" with the value on the following lines: more indented, or
		// a sequence at the same indentation.
		switch {
		case p.pos < len(p.lines) && p.lines[p.pos].indent > indent:
			v, err := p.block(p.lines[p.pos].indent)
			if err != nil {
				return nil, err
			}
			out[key] = v
		case p.pos < len(p.lines) && p.lines[p.pos].indent == indent && isSeqItem(p.lines[p.pos].text):
			v, err := p.sequence(indent)
			if err != nil {
				return nil, err
			}
			out[key] = v
		default:
			out[key] = nil
		}
	}
}

// splitKey splits "key: value" / "key:"; ok is false for a line that is
// not a mapping entry.
func splitKey(s string, num int) (key, val string, ok bool, err error) {
	if s == "" {
		return "", "", false, nil
	}
	if s[0] == '"' || s[0] == '\'' {
		end := closingQuote(s)
		if end < 0 {
			return "", "", false, fmt.Errorf("line %d: unterminated quoted key", num)
		}
		rest := s[end+1:]
		if rest != ":" && !strings.HasPrefix(rest, ": ") {
			return "", "", false, nil
		}
		k, err := scalar(s[:end+1], num)
		if err != nil {
			return "", "", false, err
		}
		return k.(string), strings.TrimSpace(rest[1:]), true, nil
	}
	i := strings.Index(s, ": ")
	if i < 0 {
		if !strings.HasSuffix(s, ":") {
			return "", "", false, nil
		}
		i = len(s) - 1
	}
	key = s[:i]
	if strings.ContainsAny(key[:1], "[{&*!|>%@`") || key == "<<" {
		return "", "", false, fmt.Errorf("line %d: unsupported key %q", num, key)
	}
	return key, strings.TrimSpace(s[i+1:]), true, nil
}

func closingQuote(s string) int {
	q := s[0]
	for i := 1; i < len(s); i++ {
		switch {
		case q == '"' && s[i] == '\\':
			i++
		case s[i] == q:
			if q == '\'' && i+1 < len(s) && s[i+1] == '\'' {
				i++
				continue
			}
			return i
		}
	}
	return -1
}

// scalar decodes one inline value.
func scalar(s string, num int) (any, error) {
	switch {
	case s == "[]":
		return []any{}, nil
	case s == "{}":
		return map[string]any{}, nil
	case s == "~" || s == "null":
		return nil, nil
	case s[0] == '"':
		if closingQuote(s) != len(s)-1 {
			return nil, fmt.Errorf("line %d: text after quoted scalar: %s", num, s)
		}
		var b strings.Builder
		for i := 1; i < len(s)-1; i++ {
			if s[i] == '\\' {
				i++
				switch s[i] {
				case '"', '\\', '/':
					b.WriteByte(s[i])
				case 'n':
					b.WriteByte('\n')
				case 't':
					b.WriteByte('\t')
				default:
					return nil, fmt.Errorf("line %d: unsupported escape \\%c", num, s[i])
				}
				continue
			}
			b.WriteByte(s[i])
		}
		return b.String(), nil
	case s[0] == '\'':
		if closingQuote(s) != len(s)-1 {
			return nil, fmt.Errorf("line %d: text after quoted scalar: %s", num, s)
		}
		return strings.ReplaceAll(s[1:len(s)-1], "''", "'"), nil
	case strings.ContainsAny(s[:1], "[{&*!|>%@`"):
		return nil, fmt.Errorf("line %d: unsupported YAML (outside the subset deploy_test reads): %s", num, s)
	case strings.Contains(s, ": "):
		return nil, fmt.Errorf("line %d: plain scalar with \": \" (quote it): %s", num, s)
	}
	return s, nil
}
