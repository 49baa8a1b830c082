package frontend

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"tablestore/frontend/auth"
	"tablestore/frontend/http1"
	"tablestore/internal/edm"
)

// Server is the Azure Table REST API front-end: a stateless net/http
// handler over a Backend.
type Server struct {
	cfg      Config
	backend  Backend
	settings Settings // nil when the backend keeps no settings
	logger   *slog.Logger
	// configured are the accounts of this front-end's configuration;
	// registered, those of the master's registry last seen (see
	// currentAuth).
	configured *authState
	registered atomic.Pointer[authState]
	tls        *tls.Config // nil: plain HTTP
	http       *http1.Server
	handler    http.Handler

	// props caches each account's parsed service properties, by
	// properties key (propsKey) → *propsCache.
	props sync.Map

	// tablePage is the most tables a Query Tables page holds without $top
	// (MaxPageSize; tests lower it to page over few tables).
	tablePage int
}

// NewServer validates cfg and returns a server answering with b. A nil
// logger discards logs.
func NewServer(cfg Config, b Backend, logger *slog.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if b == nil {
		return nil, errors.New("frontend: nil Backend")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	accts, err := cfg.servedAccounts()
	if err != nil {
		return nil, err
	}
	tlsConfig, err := cfg.loadTLS()
	if err != nil {
		return nil, err
	}
	s := &Server{
		cfg:     cfg,
		backend: b,
		logger:  logger,
		tls:     tlsConfig,

		tablePage: MaxPageSize,
	}
	s.configured = s.newAuthState(accts, nil)
	s.settings, _ = b.(Settings)
	s.handler = instrument(http.HandlerFunc(s.serveHTTP))
	s.http = &http1.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		RequestTimeout:    cfg.RequestTimeout,
		Logger:            logger,
	}
	return s, nil
}

// Handler returns the HTTP handler (for tests and for embedding).
func (s *Server) Handler() http.Handler { return s.handler }

// Serve answers requests on ln until Shutdown; it returns nil after a
// clean shutdown.
func (s *Server) Serve(ln net.Listener) error {
	s.logger.Info("frontend listening", "addr", ln.Addr().String(), "scheme", s.cfg.Scheme(), "accounts", len(s.currentAuth().accounts))
	if s.tls != nil {
		ln = tls.NewListener(ln, s.tls)
	}
	err := s.http.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Shutdown stops accepting requests and waits for those in flight until ctx
// ends.
func (s *Server) Shutdown(ctx context.Context) error { return s.http.Shutdown(ctx) }

// reqCtx is the per-request state shared by the handlers.
type reqCtx struct {
	r         *http.Request
	id        string
	meta      edm.Metadata
	xmlErrors bool // service endpoints answer errors in XML
	hostStyle bool
	account   string // the account addressed
	secondary bool   // addressed at the account's read-only secondary endpoint
	msgPrefix string // prepended to error messages ("0:" in a batch's query)
	principal *auth.Principal
	query     url.Values
	base      string // service root for odata.metadata, built on demand
	wrote     bool   // a response has been started
	start     time.Time
	// hv holds the values of the headers every answer sets (hdr): one
	// allocation with the request's state instead of one slice each.
	hv [hvSlots]string
}

// The slots of reqCtx.hv, one per header.
const (
	hvRequestID = iota
	hvETag
	hvContentLength
	hvLocation
	hvSlots
)

// hdr is a header value held in slot of rc: a one-string slice whose
// capacity ends at the slot, so that an append copies it instead of
// overwriting the next slot.
func (rc *reqCtx) hdr(slot int, v string) []string {
	rc.hv[slot] = v
	return rc.hv[slot : slot+1 : slot+1]
}

func (rc *reqCtx) method() string {
	if rc.r == nil {
		return ""
	}
	return rc.r.Method
}

func (rc *reqCtx) path() string {
	if rc.r == nil {
		return ""
	}
	return rc.r.URL.Path
}

// q returns a query parameter (first value).
func (rc *reqCtx) q(name string) string {
	if rc.query == nil {
		return ""
	}
	if v := rc.query[name]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// baseURL is the service root as the client addressed it:
// http://127.0.0.1:10002/devstoreaccount1 path-style,
// http://devstoreaccount1.table.example host-style.
func (s *Server) baseURL(rc *reqCtx) string {
	if rc.base != "" {
		return rc.base
	}
	// Built on the stack: growing it from nil took three allocations
	// before the string's own, on every answer with odata.metadata.
	var buf [128]byte
	rc.base = string(appendBaseURL(buf[:0], rc))
	return rc.base
}

// appendBaseURL appends the service root of baseURL to b.
func appendBaseURL(b []byte, rc *reqCtx) []byte {
	if rc.r.TLS != nil {
		b = append(b, "https://"...)
	} else {
		b = append(b, "http://"...)
	}
	b = append(b, rc.r.Host...)
	if !rc.hostStyle {
		b = append(b, '/')
		b = append(b, rc.account...)
		if rc.secondary {
			b = append(b, secondarySuffix...)
		}
	}
	return b
}

// serveHTTP is the single entry point: common headers, panic recovery,
// routing, authentication, authorization and dispatch.
func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	rc := &reqCtx{r: r, id: newRequestID(), start: time.Now()}
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.logger.Error("panic serving request", "request_id", rc.id, "method", r.Method, "path", r.URL.Path,
				"panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			if !rc.wrote {
				s.writeError(w, rc, errors.New("internal panic"))
			}
		}
	}()

	h := w.Header()
	h["X-Ms-Request-Id"] = rc.hdr(hvRequestID, rc.id)
	versionErr := s.checkVersion(r)
	if v := r.Header["X-Ms-Version"]; len(v) > 0 && v[0] != "" && versionErr == nil {
		h["X-Ms-Version"] = v[:1]
	} else {
		h["X-Ms-Version"] = defaultVersion
	}
	h["Date"] = s.http.DateHeader()
	if v := r.Header["X-Ms-Client-Request-Id"]; len(v) > 0 {
		h["X-Ms-Client-Request-Id"] = v[:1]
	}
	h["X-Content-Type-Options"] = noSniff
	h["Cache-Control"] = noCache

	var queryErr error
	if r.URL.RawQuery != "" {
		q, err := url.ParseQuery(r.URL.RawQuery)
		if err != nil && strings.IndexByte(r.URL.RawQuery, ';') >= 0 {
			// "$format=application/json;odata=nometadata" sent unescaped:
			// Go refuses ';' in queries, Azure reads it as part of the value.
			// auth's compSuffix reads comp the same way (the comp signed
			// must be the comp served).
			q, err = url.ParseQuery(strings.ReplaceAll(r.URL.RawQuery, ";", "%3B"))
		}
		rc.query = q // keep what parsed; an error is answered after authentication
		if err != nil {
			queryErr = errInvalidQueryParam("query", r.URL.RawQuery)
		}
	}

	p, decoded, addressed, routeErr := s.resourcePath(r)
	rc.hostStyle, rc.account, rc.secondary = addressed.hostStyle, addressed.name, addressed.secondary
	var rt route
	if routeErr == nil {
		rt, routeErr = parseRoute(p, decoded)
	}
	if rt.kind == routeService || rc.q("restype") == "service" || rc.q("comp") == "acl" {
		rc.xmlErrors = true
	}
	meta, metaErr := negotiate(rc.q("$format"), r.Header["Accept"])
	rc.meta = meta

	if r.Method == http.MethodOptions {
		// A browser's preflight carries no credentials: it is answered
		// from the CORS rules alone, before authentication.
		s.finish(w, rc, s.preflight(w, rc))
		return
	}
	w = s.corsWriter(w, rc)
	if versionErr != nil {
		// Checked before authentication, as the service and Azurite do:
		// the version decides how the request is signed and read.
		s.finish(w, rc, versionErr)
		return
	}

	authAccount := rc.account
	if authAccount == "" {
		// An unknown account is answered as InvalidUri once the caller
		// is known; authenticate against the default one until then.
		authAccount, _ = s.cfg.Endpoint()
	}
	principal, err := s.currentAuth().auth.AuthenticateAccount(r, authAccount)
	if err != nil {
		s.finish(w, rc, err)
		return
	}
	rc.principal = principal
	if v := principal.SignedVersion(); v != "" && len(r.Header["X-Ms-Version"]) == 0 {
		// A SAS request without x-ms-version runs at the SAS's sv.
		h["X-Ms-Version"] = []string{v}
	}
	if routeErr == nil {
		routeErr = queryErr
	}
	if routeErr != nil {
		s.finish(w, rc, routeErr)
		return
	}
	if metaErr != nil && !rc.xmlErrors {
		s.finish(w, rc, metaErr)
		return
	}
	// The service and ACL endpoints speak XML; elsewhere an XML body is
	// Atom, which the service no longer accepts.
	if ct := r.Header["Content-Type"]; len(ct) > 0 && !rc.xmlErrors && isAtomContentType(ct[0]) {
		s.finish(w, rc, errAtomNotSupported)
		return
	}
	// The OData endpoints speak JSON only from 2013-08-15; the refusal is
	// written as the Atom-era client reads errors, in OData XML.
	if !rc.xmlErrors {
		if err := jsonFormatRefusal(r, rc.q("$format"), principal.SignedVersion()); err != nil {
			rc.xmlErrors = true
			s.finish(w, rc, err)
			return
		}
	}

	timeout := s.cfg.RequestTimeout
	if t := rc.q("timeout"); t != "" {
		secs, err := strconv.Atoi(t)
		if err != nil || secs <= 0 {
			s.finish(w, rc, errInvalidQueryParam("timeout", t))
			return
		}
		if d := time.Duration(secs) * time.Second; d < timeout {
			timeout = d
		}
	}
	// The listener's requests come with a context that ends at
	// RequestTimeout already (http1.Server.RequestTimeout, counted from
	// the request's header): a context of its own is needed only for a
	// shorter timeout asked for, or a request from elsewhere (Handler()).
	// rc.start is before now, so a deadline by rc.start+timeout is by
	// now+timeout too.
	ctx := r.Context()
	if dl, ok := ctx.Deadline(); !ok || dl.After(rc.start.Add(timeout)) {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}

	s.finish(w, rc, s.dispatch(ctx, w, rc, rt))
}

// finish answers err when the handler did not already answer.
func (s *Server) finish(w http.ResponseWriter, rc *reqCtx, err error) {
	if err == nil || rc.wrote {
		if err != nil {
			s.logger.Warn("error after response started", "request_id", rc.id, "err", err)
		}
		return
	}
	rc.wrote = true
	s.writeError(w, rc, err)
}

// dispatch selects the operation from the route and the (possibly
// tunnelled) method.
func (s *Server) dispatch(ctx context.Context, w http.ResponseWriter, rc *reqCtx, rt route) error {
	method, err := effectiveMethod(rc.r)
	if err != nil {
		return err
	}
	if rc.secondary && method != http.MethodGet && method != http.MethodHead {
		return errSecondaryWrite
	}
	switch rt.kind {
	case routeService:
		return s.serveService(ctx, w, rc, method)
	case routeBatch:
		if method != http.MethodPost {
			return errMethodNotAllowed
		}
		return s.submitTransaction(ctx, w, rc)
	case routeTables:
		switch method {
		case http.MethodGet:
			return s.queryTables(ctx, w, rc, "")
		case http.MethodPost:
			return s.createTable(ctx, w, rc)
		}
	case routeTable:
		switch method {
		case http.MethodGet:
			return s.queryTables(ctx, w, rc, rt.table)
		case http.MethodDelete:
			return s.deleteTable(ctx, w, rc, rt.table)
		}
	case routeEntitySet:
		if rc.q("comp") == "acl" {
			switch method {
			case http.MethodGet, http.MethodHead:
				return s.getTableACL(ctx, w, rc, rt.table)
			case http.MethodPut:
				return s.setTableACL(ctx, w, rc, rt.table)
			}
			return errMethodNotAllowed
		}
		switch method {
		case http.MethodGet:
			return s.queryEntities(ctx, w, rc, rt.table)
		case http.MethodPost:
			return s.insertEntity(ctx, w, rc, rt.table)
		}
	case routeEntity:
		if err := validateURLKey("PartitionKey", rt.pk); err != nil {
			return err
		}
		if err := validateURLKey("RowKey", rt.rk); err != nil {
			return err
		}
		switch method {
		case http.MethodGet:
			return s.getEntity(ctx, w, rc, rt)
		case http.MethodPut:
			return s.updateEntity(ctx, w, rc, rt, false)
		case http.MethodPatch, "MERGE":
			return s.updateEntity(ctx, w, rc, rt, true)
		case http.MethodDelete:
			return s.deleteEntity(ctx, w, rc, rt)
		}
	}
	return errMethodNotAllowed
}

// effectiveMethod applies X-HTTP-Method tunnelling: allowed only on POST,
// once, with MERGE, PUT or DELETE (the verbs clients tunnel).
func effectiveMethod(r *http.Request) (string, error) {
	x := r.Header["X-Http-Method"]
	if len(x) == 0 {
		return r.Method, nil
	}
	if len(x) > 1 {
		return "", errXMethodCount
	}
	if r.Method != http.MethodPost {
		return "", errXMethodNotPost
	}
	switch x[0] {
	case "MERGE", "PUT", "DELETE", "PATCH":
		return x[0], nil
	}
	return "", errXMethodValue
}

func isAtomContentType(ct string) bool {
	if strings.HasPrefix(ct, "application/json") {
		return false
	}
	_, err := mediaType(ct, false)
	return err == errAtomNotSupported
}

// newRequestID returns a random (version 4) UUID, as Azure's request ids.
func newRequestID() string {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], rand.Uint64())
	binary.LittleEndian.PutUint64(b[8:], rand.Uint64())
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	var out [36]byte
	j := 0
	for i, c := range b {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			out[j] = '-'
			j++
		}
		out[j] = hexDigits[c>>4]
		out[j+1] = hexDigits[c&0xF]
		j += 2
	}
	return string(out[:])
}
