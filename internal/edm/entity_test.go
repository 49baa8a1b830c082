package edm

import (
	"errors"
	"slices"
	"testing"
	"time"
)

func testEntity() *Entity {
	return &Entity{
		PartitionKey: "pk",
		RowKey:       "rk",
		Timestamp:    mustTime("2024-01-02T03:04:05.1234567Z"),
		Properties: []Property{
			{"A", Int32Value(1)},
			{"B", StringValue("b")},
			{"C", BinaryValue([]byte{1, 2, 3})},
		},
	}
}

func TestEntityGet(t *testing.T) {
	e := testEntity()
	tests := []struct {
		name string
		want Value
		ok   bool
	}{
		{"PartitionKey", StringValue("pk"), true},
		{"RowKey", StringValue("rk"), true},
		{"Timestamp", Value{Type: TypeDateTime, Time: e.Timestamp}, true},
		{"A", Int32Value(1), true},
		{"C", BinaryValue([]byte{1, 2, 3}), true},
		{"a", Value{}, false}, // case-sensitive
		{"Missing", Value{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := e.Get(tt.name)
			if ok != tt.ok || !got.Equal(tt.want) {
				t.Fatalf("Get = %#v, %v", got, ok)
			}
		})
	}
	t.Run("unset Timestamp is absent", func(t *testing.T) {
		if _, ok := (&Entity{}).Get("Timestamp"); ok {
			t.Fatal("zero Timestamp reported")
		}
	})
}

func TestEntitySetRemove(t *testing.T) {
	e := testEntity()
	e.Set("AA", Int64Value(5)) // inserted in order
	e.Set("B", StringValue("new"))
	e.Set("0", BoolValue(true))
	e.Set("PartitionKey", StringValue("pk2"))
	ts := mustTime("2025-01-01T00:00:00Z")
	e.Set("Timestamp", Value{Type: TypeDateTime, Time: ts})
	if e.PartitionKey != "pk2" || !e.Timestamp.Equal(ts) {
		t.Fatalf("system properties not routed: %q %v", e.PartitionKey, e.Timestamp)
	}
	names := func() []string {
		var n []string
		for _, p := range e.Properties {
			n = append(n, p.Name)
		}
		return n
	}
	if got, want := names(), []string{"0", "A", "AA", "B", "C"}; !slices.Equal(got, want) {
		t.Fatalf("names = %v, want %v", got, want)
	}
	if v, _ := e.Get("B"); v.Str != "new" {
		t.Fatalf("B = %#v", v)
	}

	e.Set("RowKey", Int32Value(3)) // wrong type: kept as a property for Validate to reject
	if e.RowKey != "rk" {
		t.Fatal("RowKey overwritten by a non-string")
	}
	if err := e.Validate(); !errors.Is(err, ErrPropertyNameInvalid) {
		t.Fatalf("Validate = %v", err)
	}
	if !e.Remove("RowKey") || e.RowKey != "rk" {
		t.Fatal("Remove of the mistyped RowKey property")
	}
	if e.Remove("RowKey") || e.Remove("PartitionKey") || e.Remove("nope") {
		t.Fatal("Remove reported a removal that cannot happen")
	}
	if !e.Remove("Timestamp") || !e.Timestamp.IsZero() || e.Remove("Timestamp") {
		t.Fatal("Remove(Timestamp)")
	}
	if !e.Remove("AA") {
		t.Fatal("Remove(AA)")
	}
	if got, want := names(), []string{"0", "A", "B", "C"}; !slices.Equal(got, want) {
		t.Fatalf("names = %v, want %v", got, want)
	}

	u := &Entity{Properties: []Property{{"z", Int32Value(1)}, {"a", Int32Value(2)}}}
	u.Set("m", Int32Value(3)) // unsorted list: appended
	if u.Properties[2].Name != "m" {
		t.Fatalf("unsorted insert = %v", u.Properties)
	}
}

func TestEntityMergeFrom(t *testing.T) {
	dst := testEntity()
	src := &Entity{PartitionKey: "other", RowKey: "other", Timestamp: time.Now(), Properties: []Property{
		{"B", Int64Value(2)}, // type change is allowed
		{"D", BoolValue(false)},
	}}
	dst.MergeFrom(src)
	if d := sameEntity(dst.Clone(), dst); d != "" {
		t.Fatal(d)
	}
	want := &Entity{PartitionKey: "pk", RowKey: "rk", Timestamp: testEntity().Timestamp, Properties: []Property{
		{"A", Int32Value(1)},
		{"B", Int64Value(2)},
		{"C", BinaryValue([]byte{1, 2, 3})},
		{"D", BoolValue(false)},
	}}
	if d := sameEntity(dst, want); d != "" {
		t.Fatal(d)
	}

	// a user property named like a key stays a user property (and makes
	// the entity invalid) instead of re-keying the stored entity
	dst.MergeFrom(&Entity{Properties: []Property{{"PartitionKey", StringValue("evil")}}})
	if dst.PartitionKey != "pk" {
		t.Fatalf("merge changed the key to %q", dst.PartitionKey)
	}
	if err := dst.Validate(); !errors.Is(err, ErrPropertyNameInvalid) {
		t.Fatalf("Validate = %v", err)
	}
}

func TestEntityClone(t *testing.T) {
	e := testEntity()
	c := e.Clone()
	if d := sameEntity(e, c); d != "" {
		t.Fatal(d)
	}
	c.Properties[2].Value.Bin[0] = 9
	c.Properties[0].Value = Int32Value(7)
	c.Set("Z", BoolValue(true))
	if d := sameEntity(e, testEntity()); d != "" {
		t.Fatalf("original changed: %s", d)
	}
}

func TestEntityProject(t *testing.T) {
	e := testEntity()
	tests := []struct {
		name  string
		names []string
		want  []string
	}{
		{"nil keeps all", nil, []string{"A", "B", "C"}},
		{"star keeps all", []string{"*"}, []string{"A", "B", "C"}},
		{"subset", []string{"C", "A", "Missing"}, []string{"A", "C"}},
		{"system names only", []string{"PartitionKey", "Timestamp"}, nil},
		{"empty", []string{}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := e.Project(tt.names)
			var got []string
			for _, q := range p.Properties {
				got = append(got, q.Name)
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("properties = %v, want %v", got, tt.want)
			}
			if p.PartitionKey != e.PartitionKey || p.RowKey != e.RowKey || !p.Timestamp.Equal(e.Timestamp) {
				t.Fatal("system properties dropped")
			}
		})
	}
}
