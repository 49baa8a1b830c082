package frontend

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// CORS, evaluated against the rules of the account the request addresses
// (its service properties; path-style, production-style host and the
// -secondary forms alike, see resourcePath) as
// "Cross-Origin Resource Sharing (CORS) support for Azure Storage"
// describes, with details the service shows in recordings and Azurite's
// behaviour filling the gaps:
//
// Preflight (OPTIONS, any resource, no authentication): a request without
// Origin or Access-Control-Request-Method is 400 InvalidHeaderValue "A
// required CORS header is not present."; the first rule whose origins
// (exact, case-insensitive, or "*"), methods and allowed headers (exact or
// "prefix*", or "*") cover the request answers 200 with
// Access-Control-Allow-Origin (the request's origin),
// Access-Control-Allow-Methods (the requested method),
// Access-Control-Allow-Headers (the requested headers), Access-Control-
// Max-Age and Access-Control-Allow-Credentials: true; no rule is 403
// CorsPreflightFailure "CORS not enabled or no matching rule found for this
// request."
//
// Actual requests with an Origin matched by the first rule allowing their
// origin and method get, on success and on error alike,
// Access-Control-Allow-Origin ("*" for a rule allowing all origins, else the
// origin, then with Access-Control-Allow-Credentials: true) and
// Access-Control-Expose-Headers (the response's headers matched by the
// rule's exposed headers, then its literal ones). GET and HEAD responses
// carry Vary: Origin whenever the service has CORS rules, unless the
// matching rule allows all origins (the recordings show Vary: Origin on
// plain SDK GETs once rules exist).

var (
	errCORSHeaderMissing = newAPIError(http.StatusBadRequest, "InvalidHeaderValue", "A required CORS header is not present.", "")
	errCORS              = newAPIError(http.StatusForbidden, "CorsPreflightFailure",
		"CORS not enabled or no matching rule found for this request.", "")
	varyOrigin  = []string{"Origin"}
	credentials = []string{"true"}
	allOrigins  = []string{"*"}
)

func (r *corsRule) allowsAllOrigins() bool { return slices.Contains(r.origins, "*") }

func (r *corsRule) matchOrigin(origin string) bool {
	if r.allowsAllOrigins() {
		return true
	}
	o := strings.ToLower(strings.TrimSpace(origin))
	return slices.Contains(r.origins, o)
}

func (r *corsRule) matchMethod(m string) bool {
	for _, allowed := range r.methods {
		if strings.EqualFold(allowed, m) {
			return true
		}
	}
	return false
}

// matchHeaders reports whether every requested header is allowed.
func (r *corsRule) matchHeaders(requested []string) bool {
	for _, h := range requested {
		if !headerListMatch(r.allowed, strings.ToLower(h)) {
			return false
		}
	}
	return true
}

// headerListMatch matches a lower-case header name against a rule's list.
func headerListMatch(list []string, h string) bool {
	for _, a := range list {
		if a == "*" || a == h || (strings.HasSuffix(a, "*") && strings.HasPrefix(h, a[:len(a)-1])) {
			return true
		}
	}
	return false
}

// preflight answers an OPTIONS request.
func (s *Server) preflight(w http.ResponseWriter, rc *reqCtx) error {
	r := rc.r
	origin := r.Header.Get("Origin")
	method := r.Header.Get("Access-Control-Request-Method")
	if origin == "" || method == "" {
		return errCORSHeaderMissing
	}
	var requested []string
	for _, v := range r.Header.Values("Access-Control-Request-Headers") {
		requested = append(requested, splitList(v)...)
	}
	p, err := s.serviceProps(r.Context(), rc.account)
	if err != nil {
		return err
	}
	for i := range p.Cors {
		rule := &p.Cors[i]
		if !rule.matchOrigin(origin) || !rule.matchMethod(method) || !rule.matchHeaders(requested) {
			continue
		}
		h := w.Header()
		h["Access-Control-Allow-Origin"] = []string{origin}
		h["Access-Control-Allow-Methods"] = []string{method}
		if len(requested) > 0 {
			h["Access-Control-Allow-Headers"] = []string{strings.Join(requested, ",")}
		}
		h["Access-Control-Max-Age"] = []string{strconv.Itoa(rule.maxAge)}
		h["Access-Control-Allow-Credentials"] = credentials
		h["Content-Length"] = []string{"0"}
		rc.wrote = true
		w.WriteHeader(http.StatusOK)
		return nil
	}
	return errCORS
}

// corsWriter returns the writer for an actual request: w itself when CORS
// adds nothing, w with Vary set when only that applies, or a wrapper that
// adds the Access-Control headers when the response starts (the exposed
// headers depend on the response's own). The rules are those of the
// account the request addresses.
func (s *Server) corsWriter(w http.ResponseWriter, rc *reqCtx) http.ResponseWriter {
	r := rc.r
	origin := r.Header["Origin"]
	getHead := r.Method == http.MethodGet || r.Method == http.MethodHead
	if (len(origin) == 0 || origin[0] == "") && !getHead {
		return w
	}
	p, err := s.serviceProps(r.Context(), rc.account)
	if err != nil || len(p.Cors) == 0 {
		return w
	}
	if len(origin) == 0 || origin[0] == "" {
		w.Header()["Vary"] = varyOrigin
		return w
	}
	for i := range p.Cors {
		rule := &p.Cors[i]
		if rule.matchOrigin(origin[0]) && rule.matchMethod(r.Method) {
			return &corsResponseWriter{ResponseWriter: w, rule: rule, origin: origin[0], vary: getHead && !rule.allowsAllOrigins()}
		}
	}
	if getHead {
		w.Header()["Vary"] = varyOrigin
	}
	return w
}

// corsResponseWriter adds the Access-Control headers of a matched rule.
type corsResponseWriter struct {
	http.ResponseWriter
	rule    *corsRule
	origin  string
	vary    bool
	started bool
}

func (c *corsResponseWriter) WriteHeader(code int) {
	if !c.started {
		c.started = true
		h := c.ResponseWriter.Header()
		if c.rule.allowsAllOrigins() {
			h["Access-Control-Allow-Origin"] = allOrigins
		} else {
			h["Access-Control-Allow-Origin"] = []string{c.origin}
			h["Access-Control-Allow-Credentials"] = credentials
		}
		if c.vary {
			h["Vary"] = varyOrigin
		}
		if exposed := exposedHeaders(h, c.rule.exposed); exposed != "" {
			h["Access-Control-Expose-Headers"] = []string{exposed}
		}
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *corsResponseWriter) Write(b []byte) (int, error) {
	if !c.started {
		c.WriteHeader(http.StatusOK)
	}
	return c.ResponseWriter.Write(b)
}

// exposedHeaders lists the response headers a rule exposes (sorted, then
// the rule's literal names the response lacks), comma-separated.
func exposedHeaders(h http.Header, rules []string) string {
	if len(rules) == 0 {
		return ""
	}
	names := make([]string, 0, len(h)+1)
	for k := range h {
		if !strings.HasPrefix(k, "Access-Control-") {
			names = append(names, k)
		}
	}
	if _, ok := h["Date"]; !ok {
		names = append(names, "Date")
	}
	slices.Sort(names)
	var out []string
	seen := map[string]bool{}
	for _, n := range names {
		if headerListMatch(rules, strings.ToLower(n)) {
			out = append(out, n)
			seen[strings.ToLower(n)] = true
		}
	}
	for _, r := range rules {
		if !strings.HasSuffix(r, "*") && !seen[r] {
			out = append(out, r)
		}
	}
	return strings.Join(out, ",")
}
