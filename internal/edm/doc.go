// Package edm owns the entity model of Azure Table storage: EDM-typed
// property values, entities, their validation against Azure's limits, their
// JSON (OData v3) form at every metadata level, their compact binary form
// used in Raft commands and in bbolt, and the Timestamp/ETag formats.
package edm
