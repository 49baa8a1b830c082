package edm

import (
	"slices"
	"strings"
	"time"
)

// Get looks a property up the way $filter and $select see an entity: the
// keys are String properties, Timestamp is a DateTime property once the
// server has set it, and everything else is a user property. Names are
// case-sensitive, as in Azure.
func (e *Entity) Get(name string) (Value, bool) {
	switch name {
	case "PartitionKey":
		return StringValue(e.PartitionKey), true
	case "RowKey":
		return StringValue(e.RowKey), true
	case "Timestamp":
		if !e.Timestamp.IsZero() {
			return Value{Type: TypeDateTime, Time: e.Timestamp}, true
		}
	}
	if i := e.index(name); i >= 0 {
		return e.Properties[i].Value, true
	}
	return Value{}, false
}

func (e *Entity) index(name string) int {
	for i := range e.Properties {
		if e.Properties[i].Name == name {
			return i
		}
	}
	return -1
}

// Set stores a property. The system names are routed to their fields when
// the value has their type (String keys, DateTime Timestamp); with any other
// type they are stored as user properties so that Validate rejects the
// entity rather than the value being silently lost. New user properties are
// inserted in name order when the list is already ordered, which keeps the
// JSON encoder on its no-sort path.
func (e *Entity) Set(name string, v Value) {
	switch {
	case name == "PartitionKey" && v.Type == TypeString:
		e.PartitionKey = v.Str
		return
	case name == "RowKey" && v.Type == TypeString:
		e.RowKey = v.Str
		return
	case name == "Timestamp" && v.Type == TypeDateTime:
		e.Timestamp = v.Time
		return
	}
	e.setUser(name, v)
}

func (e *Entity) setUser(name string, v Value) {
	if i := e.index(name); i >= 0 {
		e.Properties[i].Value = v
		return
	}
	p := Property{Name: name, Value: v}
	if isSortedProps(e.Properties) {
		i, _ := slices.BinarySearchFunc(e.Properties, name, func(p Property, n string) int { return strings.Compare(p.Name, n) })
		e.Properties = slices.Insert(e.Properties, i, p)
		return
	}
	e.Properties = append(e.Properties, p)
}

// Remove deletes a user property, or clears the Timestamp, and reports
// whether anything was there. The keys cannot be removed: an entity without
// them does not exist in Azure's model.
func (e *Entity) Remove(name string) bool {
	if name == "Timestamp" && !e.Timestamp.IsZero() {
		e.Timestamp = time.Time{}
		return true
	}
	if i := e.index(name); i >= 0 {
		e.Properties = slices.Delete(e.Properties, i, i+1)
		return true
	}
	return false
}

// MergeFrom applies Azure's Merge (and Insert-or-Merge) semantics: every
// user property of src overwrites or adds to e, every other property of e
// is kept. Keys and Timestamp are not touched: the URL names the entity and
// the server stamps the result. A property cannot be deleted by a merge,
// since JSON nulls never become properties.
func (e *Entity) MergeFrom(src *Entity) {
	for i := range src.Properties {
		p := &src.Properties[i]
		e.setUser(p.Name, p.Value)
	}
}

// Clone returns a deep copy, binary values included, so the copy can be
// changed (merged into, stamped) while the original is still being read.
func (e *Entity) Clone() *Entity {
	c := *e
	c.Properties = make([]Property, len(e.Properties))
	copy(c.Properties, e.Properties)
	for i := range c.Properties {
		if b := c.Properties[i].Value.Bin; b != nil {
			c.Properties[i].Value.Bin = slices.Clone(b)
		}
	}
	return &c
}

// Project applies a $select list to the user properties and returns a new
// entity that shares value storage with e. names nil, or containing "*",
// keeps everything; names that the entity lacks are ignored.
//
// The system properties always survive. Azure returns PartitionKey, RowKey
// and Timestamp only when $select names them (the SDKs' own bug reports
// confirm unselected keys come back absent), but the entity is also needed
// after projection: its keys drive continuation tokens and its Timestamp is
// the odata.etag, which Azure returns whatever the $select. So projection
// of the system properties is done at encoding time, by EncodeOptions.Select.
func (e *Entity) Project(names []string) *Entity {
	p := &Entity{PartitionKey: e.PartitionKey, RowKey: e.RowKey, Timestamp: e.Timestamp}
	if selectsAll(names) {
		p.Properties = slices.Clone(e.Properties)
		return p
	}
	for i := range e.Properties {
		if slices.Contains(names, e.Properties[i].Name) {
			p.Properties = append(p.Properties, e.Properties[i])
		}
	}
	return p
}

func selectsAll(names []string) bool {
	return names == nil || slices.Contains(names, "*")
}

func isSortedProps(ps []Property) bool {
	for i := 1; i < len(ps); i++ {
		if ps[i-1].Name > ps[i].Name {
			return false
		}
	}
	return true
}
