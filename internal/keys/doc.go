// Package keys owns the order-preserving byte encoding of entity keys
// (PartitionKey, RowKey) used as bbolt keys, so that a byte-ordered bbolt
// cursor walks entities in Azure's PartitionKey-then-RowKey ordinal order.
package keys
