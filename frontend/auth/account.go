package auth

import (
	"encoding/base64"
	"fmt"
)

// Development account shared with Azurite and the legacy storage emulator, so
// that SDK samples and connection strings written for them ("UseDevelopmentStorage=true")
// work against tablestore unchanged.
const (
	DevAccountName = "devstoreaccount1"
	DevAccountKey  = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)

// Account is a storage account name with its key. Key holds the decoded
// bytes: the HMAC key is the base64-decoded account key, never its text.
type Account struct {
	Name string
	Key  []byte
}

// NewAccount decodes a base64 account key as it appears in connection strings.
func NewAccount(name, base64Key string) (Account, error) {
	key, err := base64.StdEncoding.DecodeString(base64Key)
	if err != nil {
		return Account{}, fmt.Errorf("auth: decoding key of account %q: %w", name, err)
	}
	if name == "" || len(key) == 0 {
		return Account{}, fmt.Errorf("auth: account name and key must not be empty")
	}
	return Account{Name: name, Key: key}, nil
}

// DevAccount returns the development account (devstoreaccount1).
func DevAccount() Account {
	acct, err := NewAccount(DevAccountName, DevAccountKey)
	if err != nil {
		panic(err) // the constant is valid base64; reaching this is a build defect
	}
	return acct
}

// Base64Key is the key as connection strings carry it.
func (a Account) Base64Key() string { return base64.StdEncoding.EncodeToString(a.Key) }

func (a Account) mac(stringToSign string) []byte {
	sum := mac(a.Key, stringToSign)
	return sum[:]
}

func (a Account) sign(stringToSign string) string {
	return base64.StdEncoding.EncodeToString(a.mac(stringToSign))
}
