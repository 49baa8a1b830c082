package filter

import (
	"errors"
	"unicode/utf8"

	"tablestore/internal/edm"
)

// Sentinel errors. Parse wraps exactly one of them so callers choose the
// HTTP answer with errors.Is instead of reading messages.
var (
	// ErrSyntax marks a filter Azure would reject with 400 InvalidInput: the
	// message says what was wrong and at which byte offset.
	ErrSyntax = errors.New("filter: syntax error")
	// ErrTooManyComparisons marks a filter over Azure's documented limit of
	// MaxComparisons comparisons; Azure rejects it rather than run it.
	ErrTooManyComparisons = errors.New("filter: too many comparisons")
	// ErrUnsupported marks valid OData that Azure Table does not implement
	// (functions, arithmetic, property-to-property comparisons); Azure
	// answers 501 NotImplemented for these, not 400.
	ErrUnsupported = errors.New("filter: unsupported")
)

// MaxComparisons is Azure's limit on comparisons in one $filter.
const MaxComparisons = 15

// MaxDepth bounds how deeply not, and, or nest, so a hostile filter cannot
// exhaust the stack of a partition server evaluating it.
const MaxDepth = 100

// Getter exposes the properties of one entity (or of one table, with the
// property "TableName") to Match. It is an interface so that each storage
// layout can serve values without first building an edm.Entity. The system
// properties PartitionKey and RowKey must be served as Strings and Timestamp
// as a DateTime.
type Getter interface {
	// Get returns the named property and whether the entity has it.
	Get(name string) (edm.Value, bool)
}

// Filter is a parsed $filter. It is immutable, so one Filter may be shared
// by every goroutine scanning for the same query. The nil *Filter is the
// empty filter: it matches everything and bounds nothing.
type Filter struct {
	root        *node
	comparisons int
	bounds      Bounds
	text        string
}

// Parse parses a $filter value (already URL-decoded). An empty or blank
// filter yields a nil *Filter and no error, as Azure treats "$filter=" as
// no filter.
func Parse(s string) (*Filter, error) {
	if !utf8.ValidString(s) {
		// A query string's %FF decodes to a byte that is no text; the
		// partition servers' gRPC could not carry the filter (the
		// client saw 500 InternalError).
		return nil, errAt(ErrSyntax, invalidUTF8At(s), "the filter is not UTF-8 text")
	}
	p := parser{src: s}
	if err := p.advance(); err != nil {
		return nil, err
	}
	if p.tok.kind == tokEOF {
		return nil, nil
	}
	root, err := p.parseOr(0)
	if err != nil {
		return nil, err
	}
	if p.tok.kind != tokEOF {
		return nil, p.unexpected("and, or or the end of the filter")
	}
	if p.comparisons > MaxComparisons {
		return nil, wrapf(ErrTooManyComparisons, "%d comparisons, Azure allows at most %d", p.comparisons, MaxComparisons)
	}
	f := &Filter{root: root, comparisons: p.comparisons}
	f.bounds = root.bounds(false)
	f.text = root.String()
	return f, nil
}

// invalidUTF8At is the offset of the first byte of s that does not start
// a valid UTF-8 sequence.
func invalidUTF8At(s string) int {
	for i, r := range s {
		if r == utf8.RuneError {
			if _, n := utf8.DecodeRuneInString(s[i:]); n == 1 {
				return i
			}
		}
	}
	return len(s)
}

// Match reports whether the entity satisfies the filter. It runs for every
// scanned entity, so it does not allocate: literals were converted at parse
// time and only the Getter is consulted.
func (f *Filter) Match(g Getter) bool {
	if f == nil {
		return true
	}
	return f.root.eval(g)
}

// String returns the canonical form of the filter: the property always on
// the left, one space between tokens, literals in one spelling, and only
// the parentheses needed around nested or/and/not. Parse(f.String()) yields
// a filter with the same String, so it serves as a cache key and in logs.
func (f *Filter) String() string {
	if f == nil {
		return ""
	}
	return f.text
}

// Comparisons returns how many comparisons count toward MaxComparisons.
func (f *Filter) Comparisons() int {
	if f == nil {
		return 0
	}
	return f.comparisons
}

// Bounds returns the PartitionKey and RowKey ranges outside which no entity
// can match, so the front-end routes the query only to the partitions that
// can hold results and a partition server seeks instead of scanning.
func (f *Filter) Bounds() Bounds {
	if f == nil {
		return Bounds{}
	}
	return f.bounds
}
