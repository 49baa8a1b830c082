package frontend

import (
	"bytes"
	"context"
	"encoding/xml"
	"net/http"
	"strconv"
	"strings"

	"tablestore/frontend/auth"
)

// Service properties (GET and PUT /?restype=service&comp=properties) and
// service stats (GET /?restype=service&comp=stats). The properties document
// is kept by the master through Settings, in the canonical form GET
// returns, and reaches every front-end with the partition map.
//
// What the service does, from the Go SDK's recordings (TestGetProperties,
// TestSetCors, TestSetLogging, TestRetentionTooLong, TestSetTooManyCors,
// TestGetStatistics):
//
//   - GET answers 200 application/xml, a UTF-8 BOM, the declaration and
//     <StorageServiceProperties> with Logging, HourMetrics, MinuteMetrics
//     and Cors in that order; a new account has hour metrics on (APIs
//     included, 7 days), minute metrics and logging off, no CORS rules
//     ("<Cors />"); IncludeAPIs is written only for enabled metrics and
//     Days only for an enabled retention policy; a CORS rule lists
//     AllowedMethods, AllowedOrigins, AllowedHeaders, ExposedHeaders,
//     MaxAgeInSeconds;
//   - PUT answers 202 with no body; an element left out keeps its current
//     setting, an empty <Cors /> removes every rule;
//   - a retention of more than 365 days and more than five CORS rules are
//     400 InvalidXmlDocument, as is every other broken rule here (missing
//     required elements, Days below 1, a method outside DELETE GET HEAD
//     MERGE PATCH POST OPTIONS PUT, more than 64 origins or literal
//     headers, more than two prefixed headers, values over 256 characters);
//   - stats exist only on the secondary endpoint (/<account>-secondary/;
//     on the primary they are 400 InvalidQueryParameterValue) and answer
//     <StorageServiceStats><GeoReplication><Status>live</Status>
//     <LastSyncTime>RFC 1123</LastSyncTime>, the oldest time up to which
//     one follower of every range holds all writes (SecondaryReader).

// maxCORSRules is Azure's limit of CORS rules per service.
const maxCORSRules = 5

// maxServicePropertiesBody bounds a Set Service Properties body.
const maxServicePropertiesBody = 64 << 10

type retention struct {
	Enabled bool
	Days    int
}

type loggingSettings struct {
	Version             string
	Read, Write, Delete bool
	Retention           retention
}

type metricsSettings struct {
	Version     string
	Enabled     bool
	IncludeAPIs bool
	Retention   retention
}

// corsRule is one CORS rule; the raw strings are what the client sent
// (trimmed), echoed back by GET.
type corsRule struct {
	rawOrigins, rawMethods, rawAllowed, rawExposed string
	origins                                        []string // lower case; "*" allows all
	methods                                        []string
	allowed, exposed                               []string // lower case; a trailing '*' is a prefix
	maxAge                                         int
}

// serviceProperties is the parsed properties document.
type serviceProperties struct {
	Logging       loggingSettings
	HourMetrics   metricsSettings
	MinuteMetrics metricsSettings
	Cors          []corsRule
}

// defaultServiceProperties is what a new account reports.
func defaultServiceProperties() *serviceProperties {
	return &serviceProperties{
		Logging:       loggingSettings{Version: "1.0"},
		HourMetrics:   metricsSettings{Version: "1.0", Enabled: true, IncludeAPIs: true, Retention: retention{Enabled: true, Days: 7}},
		MinuteMetrics: metricsSettings{Version: "1.0"},
	}
}

// XML request shapes: pointers tell an absent element from an empty one.
type xmlServiceProperties struct {
	XMLName       xml.Name    `xml:"StorageServiceProperties"`
	Logging       *xmlLogging `xml:"Logging"`
	HourMetrics   *xmlMetrics `xml:"HourMetrics"`
	MinuteMetrics *xmlMetrics `xml:"MinuteMetrics"`
	Cors          *xmlCors    `xml:"Cors"`
}

type xmlRetention struct {
	Enabled *string `xml:"Enabled"`
	Days    *string `xml:"Days"`
}

type xmlLogging struct {
	Version   *string       `xml:"Version"`
	Read      *string       `xml:"Read"`
	Write     *string       `xml:"Write"`
	Delete    *string       `xml:"Delete"`
	Retention *xmlRetention `xml:"RetentionPolicy"`
}

type xmlMetrics struct {
	Version     *string       `xml:"Version"`
	Enabled     *string       `xml:"Enabled"`
	IncludeAPIs *string       `xml:"IncludeAPIs"`
	Retention   *xmlRetention `xml:"RetentionPolicy"`
}

type xmlCors struct {
	Rules []xmlCorsRule `xml:"CorsRule"`
}

type xmlCorsRule struct {
	AllowedOrigins  *string `xml:"AllowedOrigins"`
	AllowedMethods  *string `xml:"AllowedMethods"`
	AllowedHeaders  *string `xml:"AllowedHeaders"`
	ExposedHeaders  *string `xml:"ExposedHeaders"`
	MaxAgeInSeconds *string `xml:"MaxAgeInSeconds"`
}

// parseServiceProperties applies a Set Service Properties document to cur
// (nil: the defaults) and returns the result.
func parseServiceProperties(body []byte, cur *serviceProperties) (*serviceProperties, error) {
	body = bytes.TrimPrefix(bytes.TrimSpace(body), []byte(xmlBOM))
	var doc xmlServiceProperties
	if err := decodeXML(body, &doc); err != nil {
		return nil, err
	}
	out := defaultServiceProperties()
	if cur != nil {
		c := *cur
		out = &c
	}
	var err error
	if doc.Logging != nil {
		l := doc.Logging
		var v loggingSettings
		if v.Version, err = xmlVersion(l.Version); err != nil {
			return nil, err
		}
		if v.Read, err = xmlBool("Logging/Read", l.Read); err != nil {
			return nil, err
		}
		if v.Write, err = xmlBool("Logging/Write", l.Write); err != nil {
			return nil, err
		}
		if v.Delete, err = xmlBool("Logging/Delete", l.Delete); err != nil {
			return nil, err
		}
		if v.Retention, err = xmlRetentionPolicy("Logging", l.Retention); err != nil {
			return nil, err
		}
		out.Logging = v
	}
	for _, m := range []struct {
		name string
		in   *xmlMetrics
		out  *metricsSettings
	}{{"HourMetrics", doc.HourMetrics, &out.HourMetrics}, {"MinuteMetrics", doc.MinuteMetrics, &out.MinuteMetrics}} {
		if m.in == nil {
			continue
		}
		var v metricsSettings
		if v.Version, err = xmlVersion(m.in.Version); err != nil {
			return nil, err
		}
		if v.Enabled, err = xmlBool(m.name+"/Enabled", m.in.Enabled); err != nil {
			return nil, err
		}
		if v.Enabled {
			if v.IncludeAPIs, err = xmlBool(m.name+"/IncludeAPIs", m.in.IncludeAPIs); err != nil {
				return nil, err
			}
		}
		if v.Retention, err = xmlRetentionPolicy(m.name, m.in.Retention); err != nil {
			return nil, err
		}
		*m.out = v
	}
	if doc.Cors != nil {
		if len(doc.Cors.Rules) > maxCORSRules {
			return nil, errInvalidXMLDetail(strconv.Itoa(len(doc.Cors.Rules)) + " CORS rules, the limit is 5")
		}
		rules := make([]corsRule, 0, len(doc.Cors.Rules))
		for i := range doc.Cors.Rules {
			r, err := parseCORSRule(&doc.Cors.Rules[i])
			if err != nil {
				return nil, err
			}
			rules = append(rules, r)
		}
		out.Cors = rules
	}
	return out, nil
}

func xmlVersion(v *string) (string, error) {
	if v == nil || strings.TrimSpace(*v) != "1.0" {
		return "", errInvalidXMLDetail("Version must be 1.0")
	}
	return "1.0", nil
}

func xmlBool(name string, v *string) (bool, error) {
	if v == nil {
		return false, errInvalidXMLDetail(name + " is required")
	}
	switch strings.TrimSpace(*v) {
	case "true", "True", "1":
		return true, nil
	case "false", "False", "0":
		return false, nil
	}
	return false, errInvalidXMLDetail(name + " is not a boolean")
}

func xmlRetentionPolicy(parent string, r *xmlRetention) (retention, error) {
	if r == nil {
		return retention{}, errInvalidXMLDetail(parent + "/RetentionPolicy is required")
	}
	on, err := xmlBool(parent+"/RetentionPolicy/Enabled", r.Enabled)
	if err != nil || !on {
		return retention{}, err
	}
	if r.Days == nil {
		return retention{}, errInvalidXMLDetail(parent + "/RetentionPolicy/Days is required when enabled")
	}
	days, err := strconv.Atoi(strings.TrimSpace(*r.Days))
	if err != nil || days < 1 || days > 365 {
		return retention{}, errInvalidXMLDetail(parent + "/RetentionPolicy/Days must be 1..365")
	}
	return retention{Enabled: true, Days: days}, nil
}

var corsMethods = []string{"DELETE", "GET", "HEAD", "MERGE", "PATCH", "POST", "OPTIONS", "PUT"}

func parseCORSRule(x *xmlCorsRule) (corsRule, error) {
	var r corsRule
	if x.AllowedOrigins == nil || x.AllowedMethods == nil || x.MaxAgeInSeconds == nil {
		return r, errInvalidXMLDetail("a CORS rule needs AllowedOrigins, AllowedMethods and MaxAgeInSeconds")
	}
	r.rawOrigins = strings.TrimSpace(*x.AllowedOrigins)
	r.rawMethods = strings.TrimSpace(*x.AllowedMethods)
	for _, o := range splitList(r.rawOrigins) {
		if len(o) > 256 {
			return r, errInvalidXMLDetail("CORS origin longer than 256 characters")
		}
		r.origins = append(r.origins, strings.ToLower(o))
	}
	if len(r.origins) == 0 || len(r.origins) > 64 {
		return r, errInvalidXMLDetail("a CORS rule needs 1..64 allowed origins")
	}
	for _, m := range splitList(r.rawMethods) {
		ok := false
		for _, allowed := range corsMethods {
			if m == allowed {
				ok = true
			}
		}
		if !ok {
			return r, errInvalidXMLDetail("CORS method " + strconv.Quote(m) + " is not allowed")
		}
		r.methods = append(r.methods, m)
	}
	if len(r.methods) == 0 {
		return r, errInvalidXMLDetail("a CORS rule needs allowed methods")
	}
	var err error
	if x.AllowedHeaders != nil {
		r.rawAllowed = strings.TrimSpace(*x.AllowedHeaders)
	}
	if r.allowed, err = corsHeaderList(r.rawAllowed); err != nil {
		return r, err
	}
	if x.ExposedHeaders != nil {
		r.rawExposed = strings.TrimSpace(*x.ExposedHeaders)
	}
	if r.exposed, err = corsHeaderList(r.rawExposed); err != nil {
		return r, err
	}
	if r.maxAge, err = strconv.Atoi(strings.TrimSpace(*x.MaxAgeInSeconds)); err != nil || r.maxAge < 0 {
		return r, errInvalidXMLDetail("MaxAgeInSeconds must be a non-negative integer")
	}
	return r, nil
}

func corsHeaderList(raw string) ([]string, error) {
	var out []string
	literal, prefixed := 0, 0
	for _, h := range splitList(raw) {
		if len(h) > 256 {
			return nil, errInvalidXMLDetail("CORS header longer than 256 characters")
		}
		if strings.HasSuffix(h, "*") && h != "*" {
			prefixed++
		} else {
			literal++
		}
		out = append(out, strings.ToLower(h))
	}
	if literal > 64 || prefixed > 2 {
		return nil, errInvalidXMLDetail("at most 64 literal and 2 prefixed CORS headers")
	}
	return out, nil
}

// splitList splits a comma-separated list, dropping blanks.
func splitList(s string) []string {
	var out []string
	for p := range strings.SplitSeq(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// appendServiceProperties writes the document as GET returns it (without
// the BOM and declaration, which are added on the wire).
func appendServiceProperties(b []byte, p *serviceProperties) []byte {
	b = append(b, "<StorageServiceProperties><Logging><Version>"...)
	b = append(b, p.Logging.Version...)
	b = append(b, "</Version><Read>"...)
	b = strconv.AppendBool(b, p.Logging.Read)
	b = append(b, "</Read><Write>"...)
	b = strconv.AppendBool(b, p.Logging.Write)
	b = append(b, "</Write><Delete>"...)
	b = strconv.AppendBool(b, p.Logging.Delete)
	b = append(b, "</Delete>"...)
	b = appendRetention(b, p.Logging.Retention)
	b = append(b, "</Logging>"...)
	b = appendMetrics(b, "HourMetrics", &p.HourMetrics)
	b = appendMetrics(b, "MinuteMetrics", &p.MinuteMetrics)
	if len(p.Cors) == 0 {
		b = append(b, "<Cors />"...)
	} else {
		b = append(b, "<Cors>"...)
		for i := range p.Cors {
			r := &p.Cors[i]
			b = append(b, "<CorsRule>"...)
			b = appendXMLElementOrEmpty(b, "AllowedMethods", r.rawMethods)
			b = appendXMLElementOrEmpty(b, "AllowedOrigins", r.rawOrigins)
			b = appendXMLElementOrEmpty(b, "AllowedHeaders", r.rawAllowed)
			b = appendXMLElementOrEmpty(b, "ExposedHeaders", r.rawExposed)
			b = append(b, "<MaxAgeInSeconds>"...)
			b = strconv.AppendInt(b, int64(r.maxAge), 10)
			b = append(b, "</MaxAgeInSeconds></CorsRule>"...)
		}
		b = append(b, "</Cors>"...)
	}
	return append(b, "</StorageServiceProperties>"...)
}

func appendXMLElementOrEmpty(b []byte, name, v string) []byte {
	if v == "" {
		b = append(b, '<')
		b = append(b, name...)
		return append(b, " />"...)
	}
	return appendXMLElement(b, name, v)
}

func appendRetention(b []byte, r retention) []byte {
	b = append(b, "<RetentionPolicy><Enabled>"...)
	b = strconv.AppendBool(b, r.Enabled)
	b = append(b, "</Enabled>"...)
	if r.Enabled {
		b = append(b, "<Days>"...)
		b = strconv.AppendInt(b, int64(r.Days), 10)
		b = append(b, "</Days>"...)
	}
	return append(b, "</RetentionPolicy>"...)
}

func appendMetrics(b []byte, name string, m *metricsSettings) []byte {
	b = append(b, '<')
	b = append(b, name...)
	b = append(b, "><Version>"...)
	b = append(b, m.Version...)
	b = append(b, "</Version><Enabled>"...)
	b = strconv.AppendBool(b, m.Enabled)
	b = append(b, "</Enabled>"...)
	if m.Enabled {
		b = append(b, "<IncludeAPIs>"...)
		b = strconv.AppendBool(b, m.IncludeAPIs)
		b = append(b, "</IncludeAPIs>"...)
	}
	b = appendRetention(b, m.Retention)
	b = append(b, "</"...)
	b = append(b, name...)
	return append(b, '>')
}

// propsCache holds the last properties document seen of an account and
// its parsed form, so requests pay for a parse only when the document
// changes.
type propsCache struct {
	doc   []byte
	props *serviceProperties
}

// propsKey is the name the backend keeps an account's service properties
// under: the primary account's (Config.AccountName) is the empty name, the
// one document kept before properties were per account, so a single-account
// deployment keeps its properties; every other account's is its own name.
// As for tables (tableID), every front-end must get the same AccountName.
func (s *Server) propsKey(account string) string {
	if account == "" || account == s.cfg.AccountName {
		return ""
	}
	return account
}

// serviceProps returns the service properties of the account a request
// addresses (rc.account, the served account without "-secondary"; empty
// when the request named none this server serves, which has no rules).
// Without Settings, or before any were set, they are the defaults.
func (s *Server) serviceProps(ctx context.Context, account string) (*serviceProperties, error) {
	if s.settings == nil || account == "" {
		return defaultServiceProperties(), nil
	}
	key := s.propsKey(account)
	doc, err := s.settings.ServiceProperties(ctx, key)
	if err != nil {
		return nil, err
	}
	if len(doc) == 0 && key != "" && !s.currentAuth().accounts[s.cfg.AccountName] {
		// No front-end serves the primary account (AZURITE_ACCOUNTS with
		// the default --account-name), so nothing can read or write its
		// document, the one every account shared before properties were
		// per account: an account without its own reads it, as before
		// the upgrade, until it sets its own.
		key = ""
		if doc, err = s.settings.ServiceProperties(ctx, key); err != nil {
			return nil, err
		}
	}
	c, _ := s.props.Load(key)
	if c, ok := c.(*propsCache); ok && len(c.doc) == len(doc) {
		if len(doc) == 0 || &c.doc[0] == &doc[0] {
			return c.props, nil
		}
		if bytes.Equal(c.doc, doc) {
			// The same document in a new slice (the map was reinstalled):
			// remember the slice so the next call is a pointer compare.
			s.props.Store(key, &propsCache{doc: doc, props: c.props})
			return c.props, nil
		}
	}
	p := defaultServiceProperties()
	if len(doc) > 0 {
		if parsed, err := parseServiceProperties(doc, nil); err == nil {
			p = parsed
		} else {
			s.logger.Warn("stored service properties do not parse; using defaults", "account", account, "err", err)
		}
	}
	s.props.Store(key, &propsCache{doc: doc, props: p})
	return p, nil
}

// getServiceProperties is Get Table Service Properties.
func (s *Server) getServiceProperties(ctx context.Context, w http.ResponseWriter, rc *reqCtx) error {
	if err := rc.principal.Authorize(auth.Access{Kind: auth.ServiceRead}); err != nil {
		return err
	}
	p, err := s.serviceProps(ctx, rc.account)
	if err != nil {
		return err
	}
	buf := getBuf()
	defer putBuf(buf)
	b := append(buf.b[:0], xmlBOM+xmlDecl...)
	b = appendServiceProperties(b, p)
	buf.b = b
	s.writeXML(w, rc, http.StatusOK, b)
	return nil
}

// setServiceProperties is Set Table Service Properties.
func (s *Server) setServiceProperties(ctx context.Context, w http.ResponseWriter, rc *reqCtx) error {
	if err := rc.principal.Authorize(auth.Access{Kind: auth.ServiceWrite}); err != nil {
		return err
	}
	if s.settings == nil {
		return errNotImplemented("the backend keeps no service properties")
	}
	body, err := readSmallBody(rc, maxServicePropertiesBody)
	if err != nil {
		return err
	}
	cur, err := s.serviceProps(ctx, rc.account)
	if err != nil {
		return err
	}
	next, err := parseServiceProperties(body, cur)
	if err != nil {
		return err
	}
	if err := s.settings.SetServiceProperties(ctx, s.propsKey(rc.account), appendServiceProperties(nil, next)); err != nil {
		return err
	}
	w.Header()["Content-Length"] = []string{"0"}
	rc.wrote = true
	w.WriteHeader(http.StatusAccepted)
	return nil
}

// getServiceStats is Get Table Service Stats.
func (s *Server) getServiceStats(ctx context.Context, w http.ResponseWriter, rc *reqCtx) error {
	if err := rc.principal.Authorize(auth.Access{Kind: auth.ServiceRead}); err != nil {
		return err
	}
	synced, known, err := s.lastSyncTime(ctx)
	if err != nil {
		return err
	}
	buf := getBuf()
	defer putBuf(buf)
	b := append(buf.b[:0], xmlBOM+xmlDecl...)
	if known {
		b = append(b, "<StorageServiceStats><GeoReplication><Status>live</Status><LastSyncTime>"...)
		b = synced.AppendFormat(b, http.TimeFormat)
		b = append(b, "</LastSyncTime></GeoReplication></StorageServiceStats>"...)
	} else {
		// A follower still catching up cannot say how current it is: the
		// service's answer while the secondary is not in sync.
		// LastSyncTime is left out rather than empty: SDKs parse it as a date.
		b = append(b, "<StorageServiceStats><GeoReplication><Status>bootstrap</Status></GeoReplication></StorageServiceStats>"...)
	}
	buf.b = b
	s.writeXML(w, rc, http.StatusOK, b)
	return nil
}

// serveService dispatches the service endpoint by restype and comp.
func (s *Server) serveService(ctx context.Context, w http.ResponseWriter, rc *reqCtx, method string) error {
	if rc.q("restype") != "service" {
		return errInvalidQueryParam("restype", rc.q("restype"))
	}
	switch comp := rc.q("comp"); comp {
	case "properties":
		switch method {
		case http.MethodGet, http.MethodHead:
			return s.getServiceProperties(ctx, w, rc)
		case http.MethodPut:
			return s.setServiceProperties(ctx, w, rc)
		}
		return errMethodNotAllowed
	case "stats":
		if !rc.secondary {
			// Only the secondary endpoint reports replication, as in Azure.
			return errInvalidQueryParam("comp", "stats on the primary endpoint")
		}
		if method == http.MethodGet || method == http.MethodHead {
			return s.getServiceStats(ctx, w, rc)
		}
		return errMethodNotAllowed
	default:
		return errInvalidQueryParam("comp", comp)
	}
}
