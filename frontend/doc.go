// Package frontend owns the Azure Table REST API front-end: a stateless
// net/http server that authenticates requests (package auth), decodes and
// encodes OData JSON (internal/edm), parses $filter (internal/filter) and
// calls the cluster through a Backend (package router in production). It
// translates every error into Azure's error code and HTTP status in one
// table (errors.go).
package frontend
