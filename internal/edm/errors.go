package edm

import (
	"errors"
	"net/http"
)

// Sentinel errors. Each client error is named for the Azure error code the
// front-end must answer with, so the mapping is one errors.Is per sentinel;
// details are attached with %w and are for logs, not for the wire (Azure's
// messages are fixed strings).
//
//	sentinel                  Azure code              HTTP  raised for
//	ErrInvalidInput           InvalidInput            400   malformed JSON, unknown/mismatched type,
//	                                                        bad Guid/Binary/DateTime text, duplicate
//	                                                        property, key with / \ # ? or control char,
//	                                                        malformed ETag
//	ErrOutOfRangeInput        OutOfRangeInput         400   DateTime outside 1601-01-01..9999-12-31
//	ErrPropertyValueTooLarge  PropertyValueTooLarge   400   String > 32K UTF-16 units, Binary > 64 KiB
//	ErrEntityTooLarge         EntityTooLarge          400   Size() > 1 MiB
//	ErrTooManyProperties      TooManyProperties       400   > 252 user properties
//	ErrPropertyNameInvalid    PropertyNameInvalid     400   name not a C# identifier, or a system name
//	ErrPropertyNameTooLong    PropertyNameTooLong     400   name > 255 UTF-16 units
//	ErrPropertiesNeedValue    PropertiesNeedValue     400   body lacks PartitionKey/RowKey (callers
//	                                                        detect this with DecodeJSONKeys)
//	ErrKeyValueTooLarge       KeyValueTooLarge        400   PartitionKey/RowKey > 1024 UTF-16 units
//	ErrCorrupt                InternalError           500   stored bytes do not decode (our bug or
//	                                                        disk damage, never the client's)
//
// Evidence: the codes and statuses come from the Table service error-code
// reference and the service's own status table (TableStatusEntries in the
// storage emulator, which shares the service code: KeyValueTooLarge is
// "The 'PartitionKey' property exceeds the maximum allowed key size (2KB)...
// 1K or less"), the Go SDK recording TestInvalidEntity (missing keys →
// PropertiesNeedValue), field reports of InvalidInput for '/' in a RowKey,
// and of OutOfRangeInput for DateTime values before 1601.
var (
	ErrInvalidInput          = errors.New("edm: invalid input")
	ErrOutOfRangeInput       = errors.New("edm: input out of range")
	ErrPropertyValueTooLarge = errors.New("edm: property value too large")
	ErrEntityTooLarge        = errors.New("edm: entity too large")
	ErrTooManyProperties     = errors.New("edm: too many properties")
	ErrPropertyNameInvalid   = errors.New("edm: property name invalid")
	ErrPropertyNameTooLong   = errors.New("edm: property name too long")
	ErrPropertiesNeedValue   = errors.New("edm: properties need value")
	ErrKeyValueTooLarge      = errors.New("edm: key value too large")
	ErrCorrupt               = errors.New("edm: corrupt binary entity")
)

var azureErrors = [...]struct {
	err    error
	code   string
	status int
}{
	{ErrInvalidInput, "InvalidInput", http.StatusBadRequest},
	{ErrOutOfRangeInput, "OutOfRangeInput", http.StatusBadRequest},
	{ErrPropertyValueTooLarge, "PropertyValueTooLarge", http.StatusBadRequest},
	{ErrEntityTooLarge, "EntityTooLarge", http.StatusBadRequest},
	{ErrTooManyProperties, "TooManyProperties", http.StatusBadRequest},
	{ErrPropertyNameInvalid, "PropertyNameInvalid", http.StatusBadRequest},
	{ErrPropertyNameTooLong, "PropertyNameTooLong", http.StatusBadRequest},
	{ErrPropertiesNeedValue, "PropertiesNeedValue", http.StatusBadRequest},
	{ErrKeyValueTooLarge, "KeyValueTooLarge", http.StatusBadRequest},
	{ErrCorrupt, "InternalError", http.StatusInternalServerError},
}

// AzureError maps an error from this package to the Azure error code and
// HTTP status the service would answer with, so the front-end needs no
// table of its own. ok is false for errors that did not come from here.
func AzureError(err error) (code string, status int, ok bool) {
	for _, a := range azureErrors {
		if errors.Is(err, a.err) {
			return a.code, a.status, true
		}
	}
	return "", 0, false
}
