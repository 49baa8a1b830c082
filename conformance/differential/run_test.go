package differential

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
)

// pval is a property value as answered, normalized so that spellings of
// the same value compare equal: typ is the EDM type ("null" for a JSON
// null), val the canonical text.
type pval struct{ typ, val string }

func (p pval) String() string {
	if p.typ == "null" {
		return "null"
	}
	return p.typ + "(" + p.val + ")"
}

// result is everything a query answered, all pages collected.
type result struct {
	status int    // 0: success
	code   string // error code when status != 0
	msg    string
	keys   []string
	ents   map[string]map[string]pval
	pages  []int // entities per page
	// keyless counts entities answered without PartitionKey or RowKey:
	// they cannot be matched with the other side's.
	keyless int
}

func (r result) errText() string {
	if r.status == 0 {
		return "200 OK"
	}
	return fmt.Sprintf("%d %s", r.status, r.code)
}

// runQuery runs q through the SDK pager and collects every page.
func runQuery(ctx context.Context, c *aztables.Client, q query) result {
	opts := &aztables.ListEntitiesOptions{}
	if q.filter != nil {
		opts.Filter = to.Ptr(q.filter.render())
	}
	if q.top > 0 {
		opts.Top = to.Ptr(q.top)
	}
	if q.sel != nil {
		opts.Select = to.Ptr(strings.Join(q.sel, ","))
	}
	res := result{ents: map[string]map[string]pval{}}
	p := c.NewListEntitiesPager(opts)
	for p.More() && len(res.pages) < 2000 {
		resp, err := p.NextPage(ctx)
		if err != nil {
			var re *azcore.ResponseError
			if errors.As(err, &re) {
				res.status, res.code = re.StatusCode, re.ErrorCode
			} else {
				res.status, res.code = -1, "transport"
			}
			res.msg = err.Error()
			return res
		}
		res.pages = append(res.pages, len(resp.Entities))
		for _, raw := range resp.Entities {
			m, err := normalize(raw)
			if err != nil {
				res.status, res.code, res.msg = -1, "undecodable entity", err.Error()
				return res
			}
			pk, okp := m["PartitionKey"]
			rk, okr := m["RowKey"]
			if !okp || !okr {
				res.keyless++
				continue
			}
			k := pk.val + "/" + rk.val
			res.keys = append(res.keys, k)
			res.ents[k] = m
		}
	}
	return res
}

// normalize reads one minimal-metadata entity: OData control information
// dropped, Timestamp kept only as present (its value differs between any
// two servers), every value typed and in canonical text.
func normalize(raw []byte) (map[string]pval, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, err
	}
	out := map[string]pval{}
	for name, v := range m {
		if strings.HasPrefix(name, "odata.") || strings.HasSuffix(name, "@odata.type") {
			continue
		}
		typ, _ := m[name+"@odata.type"].(string)
		pv, err := canonical(typ, v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if name == "Timestamp" {
			pv.val = "(present)"
		}
		out[name] = pv
	}
	return out, nil
}

func canonical(typ string, v any) (pval, error) {
	switch v := v.(type) {
	case nil:
		return pval{"null", ""}, nil
	case bool:
		return pval{tBoolean, strconv.FormatBool(v)}, nil
	case json.Number:
		s := v.String()
		if typ == "" {
			typ = tDouble
			if !strings.ContainsAny(s, ".eE") {
				typ = tInt32
			}
		}
		if typ == tDouble {
			f, err := strconv.ParseFloat(s, 64)
			if err != nil {
				return pval{}, err
			}
			s = strconv.FormatFloat(f, 'g', -1, 64)
		}
		return pval{typ, s}, nil
	case string:
		switch typ {
		case "":
			return pval{tString, v}, nil
		case tDateTime:
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return pval{}, err
			}
			return pval{typ, t.UTC().Format(time.RFC3339Nano)}, nil
		case tGuid:
			return pval{typ, strings.ToLower(v)}, nil
		case tBinary:
			b, err := base64.StdEncoding.DecodeString(v)
			if err != nil {
				return pval{}, err
			}
			return pval{typ, hex.EncodeToString(b)}, nil
		}
		return pval{typ, v}, nil
	}
	return pval{}, fmt.Errorf("unexpected JSON value %T", v)
}

// diff is one difference between the two answers to a query.
type diff struct {
	kind   string // error, keys, order, props, paging, keyless
	key    string // keys, props: the entity
	side   string // keys: the side that returned the entity; paging: the side
	detail string
}

// compare lists the differences between tablestore's answer ts and
// Azurite's az to q.
func compare(q query, ts, az result) []diff {
	if ts.status != 0 || az.status != 0 {
		if ts.status == az.status && ts.code == az.code {
			return nil
		}
		return []diff{{kind: "error", detail: "tablestore " + ts.errText() + ", azurite " + az.errText()}}
	}
	if ts.keyless > 0 || az.keyless > 0 {
		return []diff{{kind: "keyless", detail: fmt.Sprintf("entities without PartitionKey or RowKey: tablestore %d of %d, azurite %d of %d",
			ts.keyless, ts.keyless+len(ts.keys), az.keyless, az.keyless+len(az.keys))}}
	}
	var out []diff
	for _, k := range ts.keys {
		if _, ok := az.ents[k]; !ok {
			out = append(out, diff{kind: "keys", key: k, side: "tablestore"})
		}
	}
	for _, k := range az.keys {
		if _, ok := ts.ents[k]; !ok {
			out = append(out, diff{kind: "keys", key: k, side: "azurite"})
		}
	}
	if len(out) == 0 && !slices.Equal(ts.keys, az.keys) {
		out = append(out, diff{kind: "order", detail: fmt.Sprintf("tablestore %v\nazurite    %v", ts.keys, az.keys)})
	}
	for _, k := range ts.keys {
		b, ok := az.ents[k]
		if !ok {
			continue
		}
		a := ts.ents[k]
		for _, n := range propNames(a, b) {
			x, okx := a[n]
			y, oky := b[n]
			if okx == oky && x == y {
				continue
			}
			out = append(out, diff{kind: "props", key: k, side: n, detail: fmt.Sprintf("tablestore %s, azurite %s", state(x, okx), state(y, oky))})
		}
	}
	if q.top > 0 {
		for side, r := range map[string]result{"tablestore": ts, "azurite": az} {
			for _, n := range r.pages {
				if n > int(q.top) {
					out = append(out, diff{kind: "paging", side: side, detail: fmt.Sprintf("a page of %d with $top=%d", n, q.top)})
					break
				}
			}
		}
	}
	return out
}

func state(p pval, ok bool) string {
	if !ok {
		return "absent"
	}
	return p.String()
}

// propNames is every property name of a, in order, then those only b has.
func propNames(a, b map[string]pval) []string {
	names := slices.Sorted(maps.Keys(a))
	for n := range b {
		if _, ok := a[n]; !ok {
			names = append(names, n)
		}
	}
	return names
}
