package deploy

import (
	"bytes"
	"fmt"
	"regexp"
	"strconv"

	"sigs.k8s.io/yaml"
)

// docSeparator splits a YAML stream into documents.
var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// yamlDocs returns the non-empty documents of a YAML stream.
func yamlDocs(src string) [][]byte {
	var out [][]byte
	for _, d := range docSeparator.Split(src, -1) {
		if len(bytes.TrimSpace(stripComments([]byte(d)))) > 0 {
			out = append(out, []byte(d))
		}
	}
	return out
}

var commentLine = regexp.MustCompile(`(?m)^\s*#.*$`)

func stripComments(b []byte) []byte { return commentLine.ReplaceAll(b, nil) }

// parseYAML returns the documents of a YAML stream as generic values for the
// command-line checks: mappings are map[string]any, sequences []any, and
// every scalar is its string form (numbers and booleans included), since
// those checks compare flag and port text.
func parseYAML(src string) ([]any, error) {
	var docs []any
	for i, d := range yamlDocs(src) {
		var v any
		if err := yaml.Unmarshal(d, &v); err != nil {
			return nil, fmt.Errorf("document %d: %w", i+1, err)
		}
		docs = append(docs, scalarsToStrings(v))
	}
	return docs, nil
}

func scalarsToStrings(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = scalarsToStrings(e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = scalarsToStrings(e)
		}
		return x
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case bool:
		return strconv.FormatBool(x)
	default:
		return v
	}
}
