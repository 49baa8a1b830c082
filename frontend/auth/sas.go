package auth

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strings"
	"time"
)

// SASVersion is the signed version (sv) the Go aztables SDK uses and the
// default for ServiceSAS and AccountSAS.
const SASVersion = "2019-02-02"

const (
	// minSASVersion is where sip and spr joined the string-to-sign; older
	// formats cannot carry the restrictions we enforce, so they are refused.
	minSASVersion = "2015-04-05"
	// encryptionScopeVersion is where account SAS gained the ses line.
	encryptionScopeVersion = "2020-12-06"
)

// Protocol values for spr. Plain "http" is not a value Azure accepts.
const (
	ProtocolHTTPS        = "https"
	ProtocolHTTPSAndHTTP = "https,http"
)

type sasKind int

const (
	sasService sasKind = iota + 1
	sasAccount
)

// sasToken holds SAS query parameters exactly as received (URL-decoded),
// because the signature covers the received text, not a normalised form.
type sasToken struct {
	kind        sasKind
	version     string // sv
	permissions string // sp
	start       string // st
	expiry      string // se
	ip          string // sip
	protocol    string // spr
	sig         []byte

	// service SAS
	table      string // tn
	identifier string // si
	spk, srk   string
	epk, erk   string

	// account SAS
	services        string // ss
	resourceTypes   string // srt
	encryptionScope string // ses
}

var sasParams = []string{"sv", "sp", "st", "se", "sip", "spr", "sig", "tn", "si", "spk", "srk", "epk", "erk", "ss", "srt", "ses"}

// parseSAS validates the shape of a SAS before any signature work. Repeated
// parameters are refused so that the value we verify is the value we use.
func parseSAS(q url.Values) (*sasToken, error) {
	for _, k := range sasParams {
		if len(q[k]) > 1 {
			return nil, fmt.Errorf("SAS parameter %q appears more than once", k)
		}
	}
	get := func(k string) string { return q.Get(k) }
	rawSig := get("sig")
	if rawSig == "" {
		return nil, errors.New("SAS has no sig")
	}
	// A client that left '+' unencoded sends a space after form decoding;
	// base64 never contains spaces, so this is the signature it meant.
	sig, err := base64.StdEncoding.DecodeString(strings.ReplaceAll(rawSig, " ", "+"))
	if err != nil || len(sig) == 0 {
		return nil, errors.New("SAS sig is not base64")
	}
	t := &sasToken{
		version:     get("sv"),
		permissions: get("sp"),
		start:       get("st"),
		expiry:      get("se"),
		ip:          get("sip"),
		protocol:    get("spr"),
		sig:         sig,
	}
	if !isVersion(t.version) {
		return nil, fmt.Errorf("SAS sv %q is missing or not a YYYY-MM-DD service version", t.version)
	}
	if t.version < minSASVersion {
		return nil, fmt.Errorf("SAS sv %s is older than %s, which is not supported", t.version, minSASVersion)
	}
	switch t.protocol {
	case "", ProtocolHTTPS, ProtocolHTTPSAndHTTP, "http,https":
	default:
		return nil, fmt.Errorf("SAS spr %q is not https or https,http", t.protocol)
	}
	if t.ip != "" {
		if _, err := parseIPRange(t.ip); err != nil {
			return nil, err
		}
	}
	for _, f := range []struct{ name, v string }{{"st", t.start}, {"se", t.expiry}} {
		if f.v == "" {
			continue
		}
		if _, err := parseSASTime(f.v); err != nil {
			return nil, fmt.Errorf("SAS %s %q is not an ISO 8601 UTC time", f.name, f.v)
		}
	}

	tn, srt, ss := get("tn"), get("srt"), get("ss")
	switch {
	case tn != "" && (srt != "" || ss != ""):
		return nil, errors.New("SAS mixes service (tn) and account (ss, srt) parameters")
	case tn != "":
		t.kind = sasService
		t.table = tn
		t.identifier = get("si")
		t.spk, t.srk, t.epk, t.erk = get("spk"), get("srk"), get("epk"), get("erk")
		if err := onlyLetters("sp", t.permissions, "raud"); err != nil {
			return nil, err
		}
		if t.srk != "" && t.spk == "" {
			return nil, errors.New("SAS srk requires spk")
		}
		if t.erk != "" && t.epk == "" {
			return nil, errors.New("SAS erk requires epk")
		}
	case srt != "" || ss != "":
		t.kind = sasAccount
		t.services, t.resourceTypes = ss, srt
		t.encryptionScope = get("ses")
		if ss == "" || srt == "" || t.permissions == "" || t.expiry == "" {
			return nil, errors.New("account SAS needs ss, srt, sp and se")
		}
		if err := onlyLetters("ss", ss, "bqtf"); err != nil {
			return nil, err
		}
		if err := onlyLetters("srt", srt, "sco"); err != nil {
			return nil, err
		}
		if err := onlyLetters("sp", t.permissions, "rwdxylacuptfi"); err != nil {
			return nil, err
		}
	default:
		return nil, errors.New("SAS has neither tn (service SAS) nor ss/srt (account SAS)")
	}
	return t, nil
}

func isVersion(v string) bool {
	if len(v) != 10 || v[4] != '-' || v[7] != '-' {
		return false
	}
	for i, c := range v {
		if i != 4 && i != 7 && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

func onlyLetters(name, v, allowed string) error {
	for _, c := range v {
		if !strings.ContainsRune(allowed, c) {
			return fmt.Errorf("SAS %s %q has %q; allowed letters are %q", name, v, c, allowed)
		}
	}
	return nil
}

// stringToSign follows "Create a service SAS" (table format, 2015-04-05
// and later) and "Create an account SAS" (ses line from 2020-12-06).
func (t *sasToken) stringToSign(account string) string {
	if t.kind == sasAccount {
		parts := []string{account, t.permissions, t.services, t.resourceTypes, t.start, t.expiry, t.ip, t.protocol, t.version}
		if t.version >= encryptionScopeVersion {
			parts = append(parts, t.encryptionScope)
		}
		return strings.Join(parts, "\n") + "\n"
	}
	return strings.Join([]string{
		t.permissions, t.start, t.expiry,
		"/table/" + account + "/" + strings.ToLower(t.table),
		t.identifier, t.ip, t.protocol, t.version,
		t.spk, t.srk, t.epk, t.erk,
	}, "\n")
}

// sasTimeLayouts are the "Formatting DateTime values" forms Azure accepts;
// fractional seconds are accepted by the seconds layout when parsing.
var sasTimeLayouts = []string{
	"2006-01-02T15:04:05Z07:00",
	"2006-01-02T15:04Z07:00",
	"2006-01-02",
}

func parseSASTime(s string) (time.Time, error) {
	for _, l := range sasTimeLayouts {
		if t, err := time.Parse(l, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("bad SAS time %q", s)
}

const sasTimeFormat = "2006-01-02T15:04:05Z"

func formatSASTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(sasTimeFormat)
}

// ipRange is an inclusive sip range; a single address has start == end.
type ipRange struct{ start, end netip.Addr }

func parseIPRange(s string) (ipRange, error) {
	a, b, isRange := strings.Cut(s, "-")
	start, err := netip.ParseAddr(strings.TrimSpace(a))
	if err != nil {
		return ipRange{}, fmt.Errorf("SAS sip %q is not an IP address or range", s)
	}
	end := start
	if isRange {
		if end, err = netip.ParseAddr(strings.TrimSpace(b)); err != nil {
			return ipRange{}, fmt.Errorf("SAS sip %q is not an IP address or range", s)
		}
	}
	start, end = start.Unmap(), end.Unmap()
	if start.Is4() != end.Is4() || end.Less(start) {
		return ipRange{}, fmt.Errorf("SAS sip %q is not an ascending range of one address family", s)
	}
	return ipRange{start: start, end: end}, nil
}

func (r ipRange) contains(a netip.Addr) bool {
	a = a.Unmap()
	return a.Is4() == r.start.Is4() && !a.Less(r.start) && !r.end.Less(a)
}

// ServiceSAS describes a table service SAS to be produced with Encode.
// Zero fields are left out of the token.
type ServiceSAS struct {
	Version     string // sv; SASVersion when empty
	Table       string // tn; signed lower-cased, as Azure requires
	Permissions string // sp: letters from "raud"; empty when taken from a stored policy
	Start       time.Time
	Expiry      time.Time
	Identifier  string // si: a stored access policy id
	IPRange     string // sip: "a.b.c.d" or "a.b.c.d-e.f.g.h"
	Protocol    string // spr: ProtocolHTTPS or ProtocolHTTPSAndHTTP

	StartPartitionKey, StartRowKey string
	EndPartitionKey, EndRowKey     string
}

// Encode signs the SAS with acct and returns its query parameters. Unlike
// aztables, it emits spk/srk/epk/erk when set, since they are signed.
func (s ServiceSAS) Encode(acct Account) (url.Values, error) {
	if err := checkAccount(acct); err != nil {
		return nil, err
	}
	t := &sasToken{
		kind: sasService, version: s.Version, permissions: s.Permissions,
		start: formatSASTime(s.Start), expiry: formatSASTime(s.Expiry),
		ip: s.IPRange, protocol: s.Protocol,
		table: strings.ToLower(s.Table), identifier: s.Identifier,
		spk: s.StartPartitionKey, srk: s.StartRowKey, epk: s.EndPartitionKey, erk: s.EndRowKey,
	}
	if t.version == "" {
		t.version = SASVersion
	}
	if t.table == "" {
		return nil, errors.New("auth: service SAS needs a table name")
	}
	if t.identifier == "" && (t.permissions == "" || t.expiry == "") {
		return nil, errors.New("auth: service SAS needs permissions and expiry unless it names a stored access policy")
	}
	v := url.Values{}
	add := func(k, val string) {
		if val != "" {
			v.Set(k, val)
		}
	}
	add("sv", t.version)
	add("tn", t.table)
	add("sp", t.permissions)
	add("st", t.start)
	add("se", t.expiry)
	add("si", t.identifier)
	add("sip", t.ip)
	add("spr", t.protocol)
	add("spk", t.spk)
	add("srk", t.srk)
	add("epk", t.epk)
	add("erk", t.erk)
	v.Set("sig", acct.sign(t.stringToSign(acct.Name)))
	if _, err := parseSAS(v); err != nil {
		return nil, fmt.Errorf("auth: invalid service SAS: %w", err)
	}
	return v, nil
}

// AccountSAS describes an account SAS to be produced with Encode.
type AccountSAS struct {
	Version         string // sv; SASVersion when empty
	Services        string // ss: letters from "bqtf"; must contain "t" to be useful here
	ResourceTypes   string // srt: letters from "sco"
	Permissions     string // sp: letters from "rwdlacup..."
	Start           time.Time
	Expiry          time.Time
	IPRange         string
	Protocol        string
	EncryptionScope string // ses; signed only for sv >= 2020-12-06
}

// Encode signs the account SAS with acct and returns its query parameters.
func (s AccountSAS) Encode(acct Account) (url.Values, error) {
	if err := checkAccount(acct); err != nil {
		return nil, err
	}
	t := &sasToken{
		kind: sasAccount, version: s.Version, permissions: s.Permissions,
		start: formatSASTime(s.Start), expiry: formatSASTime(s.Expiry),
		ip: s.IPRange, protocol: s.Protocol,
		services: s.Services, resourceTypes: s.ResourceTypes, encryptionScope: s.EncryptionScope,
	}
	if t.version == "" {
		t.version = SASVersion
	}
	v := url.Values{}
	add := func(k, val string) {
		if val != "" {
			v.Set(k, val)
		}
	}
	add("sv", t.version)
	add("ss", t.services)
	add("srt", t.resourceTypes)
	add("sp", t.permissions)
	add("st", t.start)
	add("se", t.expiry)
	add("sip", t.ip)
	add("spr", t.protocol)
	if t.version >= encryptionScopeVersion {
		add("ses", t.encryptionScope)
	}
	v.Set("sig", acct.sign(t.stringToSign(acct.Name)))
	if _, err := parseSAS(v); err != nil {
		return nil, fmt.Errorf("auth: invalid account SAS: %w", err)
	}
	return v, nil
}
