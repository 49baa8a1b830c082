package frontend

import (
	"net/http"
	"strings"
)

// knownVersions are the x-ms-version values of the Storage REST API that
// the Table service answers to (the published service versions, oldest
// last). A version outside this set is 400 InvalidHeaderValue, as Azure
// answers it; Config.SkipAPIVersionCheck (Azurite's --skipApiVersionCheck)
// accepts any value instead.
var knownVersions = map[string]bool{
	"2026-06-06": true, "2026-04-06": true, "2026-02-06": true,
	"2025-11-05": true, "2025-07-05": true, "2025-05-05": true, "2025-01-05": true,
	"2024-11-04": true, "2024-08-04": true, "2024-05-04": true, "2024-02-04": true,
	"2023-11-03": true, "2023-08-03": true, "2023-01-03": true,
	"2022-11-02": true,
	"2021-12-02": true, "2021-10-04": true, "2021-08-06": true, "2021-06-08": true, "2021-04-10": true, "2021-02-12": true,
	"2020-12-06": true, "2020-10-02": true, "2020-08-04": true, "2020-06-12": true, "2020-04-08": true, "2020-02-10": true,
	"2019-12-12": true, "2019-10-10": true, "2019-07-07": true, "2019-02-02": true,
	"2018-11-09": true, "2018-03-28": true,
	"2017-11-09": true, "2017-07-29": true, "2017-04-17": true,
	"2016-05-31": true,
	"2015-12-11": true, "2015-07-08": true, "2015-04-05": true, "2015-02-21": true,
	"2014-02-14": true, "2013-08-15": true, "2012-02-12": true, "2011-08-18": true,
	"2009-09-19": true, "2009-07-17": true, "2009-04-14": true,
}

const msgInvalidHeaderValue = "The value for one of the HTTP headers is not in the correct format."

// checkVersion validates the request's x-ms-version (absent or empty: the
// default version applies).
func (s *Server) checkVersion(r *http.Request) error {
	v := r.Header["X-Ms-Version"]
	if len(v) == 0 || v[0] == "" || s.cfg.SkipAPIVersionCheck || knownVersions[v[0]] {
		return nil
	}
	return newAPIError(http.StatusBadRequest, "InvalidHeaderValue", msgInvalidHeaderValue, "x-ms-version "+v[0]+" is not a known service version")
}

// atomOnlyVersions are the published service versions before 2013-08-15,
// the first that speaks JSON ("Payload format for Table service
// operations": JSON "is supported only for version 2013-08-15 and newer").
var atomOnlyVersions = map[string]bool{
	"2012-02-12": true, "2011-08-18": true, "2009-09-19": true, "2009-07-17": true, "2009-04-14": true,
}

// jsonFormatRefusal answers a request that asks for JSON ($format or an
// Accept media range application/json) or sends a JSON body at one of
// atomOnlyVersions: 415 JsonFormatNotSupported, "JSON format is not
// supported.", what the service answered a JSON-speaking client library
// whose SAS ran at 2012-02-12 (azure-storage-net issue 32, a read) and an
// Azure Stack table service a JSON Create Table (azure-storage-python
// issue 104, whose error body was the m:-prefixed OData XML error). A
// request at such a version that names no format is served in JSON as at
// any other version: the service would answer it in Atom, which tablestore
// does not write. Versions outside knownVersions (accepted only with
// SkipAPIVersionCheck) are not refused. A SAS request runs at its signed
// version sv (given as sasVersion), whatever its x-ms-version says
// ("Previous Azure Storage service versions": the header "is ignored"),
// and tablestore takes no sv before 2015-04-05.
func jsonFormatRefusal(r *http.Request, format, sasVersion string) error {
	if sasVersion != "" {
		return nil
	}
	v := r.Header["X-Ms-Version"]
	if len(v) == 0 || !atomOnlyVersions[v[0]] {
		return nil
	}
	json := format != "" && isJSONMediaType(format)
	for _, a := range r.Header["Accept"] {
		for part := range strings.SplitSeq(a, ",") {
			json = json || isJSONMediaType(part)
		}
	}
	for _, ct := range r.Header["Content-Type"] {
		json = json || isJSONMediaType(ct)
	}
	if json {
		return errJSONNotSupported
	}
	return nil
}

// isJSONMediaType reports whether a media range or $format value is JSON
// (application/json with any parameters, or $format's short "json").
func isJSONMediaType(s string) bool {
	typ, _, _ := strings.Cut(s, ";")
	typ = strings.ToLower(strings.TrimSpace(typ))
	return typ == "application/json" || typ == "json"
}
