package conformance

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"software.sslmate.com/src/go-pkcs12"

	"tablestore/cluster"
	"tablestore/frontend"
	"tablestore/frontend/auth"
	"tablestore/frontend/router"
	"tablestore/internal/logging"
)

// Azurite parity: the switches and endpoints emulator users rely on, each
// on an extra front-end of the shared cluster started with that setting.

// startFrontend starts a front-end on the shared cluster's masters with
// tune applied to its configuration.
func startFrontend(t *testing.T, tune func(*frontend.Config)) *cluster.FrontendNode {
	t.Helper()
	fcfg, rcfg := frontend.DefaultConfig(), router.DefaultConfig()
	fcfg.HTTPAddr = "127.0.0.1:0"
	rcfg.Masters = tc.MasterAddrs()
	tune(&fcfg)
	n, err := cluster.StartFrontend(fcfg, rcfg, logging.FromEnv(""))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	return n
}

// testCert is a CA and a server certificate for 127.0.0.1 and localhost
// names, written as PEM files and as a PKCS#12 bundle.
type testCert struct {
	pool                 *x509.CertPool
	certPEM, keyPEM, pfx string
}

const pfxPassword = "s3cret"

func newTestCert(t *testing.T) testCert {
	t.Helper()
	dir := t.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "tablestore test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost", "*.table.localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	leafCert, _ := x509.ParseCertificate(der)
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	c := testCert{pool: x509.NewCertPool(), certPEM: filepath.Join(dir, "cert.pem"), keyPEM: filepath.Join(dir, "key.pem"), pfx: filepath.Join(dir, "cert.pfx")}
	c.pool.AddCert(caCert)
	write := func(path string, b []byte) {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(c.certPEM, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	write(c.keyPEM, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}))
	pfx, err := pkcs12.Modern.Encode(key, leafCert, []*x509.Certificate{caCert}, pfxPassword)
	if err != nil {
		t.Fatal(err)
	}
	write(c.pfx, pfx)
	// The JS SDK test trusts the CA through NODE_EXTRA_CA_CERTS.
	write(filepath.Join(dir, "ca.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}))
	return c
}

// caFile is the CA's PEM file written by newTestCert.
func (c testCert) caFile() string { return filepath.Join(filepath.Dir(c.certPEM), "ca.pem") }

// tlsOptions are SDK client options trusting the test CA, optionally
// dialing addr whatever the URL's host (for production-style host names).
func tlsOptions(pool *x509.CertPool, addr string) *aztables.ClientOptions {
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	if addr != "" {
		tr.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}
	}
	return &aztables.ClientOptions{ClientOptions: azcore.ClientOptions{
		Transport: &http.Client{Transport: &headerChecker{next: tr}},
		Retry:     policy.RetryOptions{MaxRetries: 3, RetryDelay: 50 * time.Millisecond, MaxRetryDelay: 500 * time.Millisecond},
	}}
}

// roundTrip creates a table, writes and reads an entity through svc.
func roundTrip(t *testing.T, svc *aztables.ServiceClient, table string) {
	t.Helper()
	ctx := context.Background()
	if _, err := svc.CreateTable(ctx, table, nil); err != nil {
		t.Fatalf("create %s: %v", table, err)
	}
	c := svc.NewClient(table)
	if _, err := c.AddEntity(ctx, []byte(`{"PartitionKey":"p","RowKey":"r","V":7}`), nil); err != nil {
		t.Fatal(err)
	}
	got, err := c.GetEntity(ctx, "p", "r", nil)
	if err != nil || !strings.Contains(string(got.Value), `"V":7`) {
		t.Fatalf("get: %v %s", err, got.Value)
	}
}

func TestHTTPS(t *testing.T) {
	cert := newTestCert(t)
	for _, tc := range []struct {
		name string
		tune func(*frontend.Config)
	}{
		{"PEM", func(c *frontend.Config) { c.CertFile, c.KeyFile = cert.certPEM, cert.keyPEM }},
		{"PFX", func(c *frontend.Config) { c.CertFile, c.CertPassword = cert.pfx, pfxPassword }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := startFrontend(t, tc.tune)
			fc := &cluster.Cluster{Frontends: []*cluster.FrontendNode{n}}
			cs := fc.ConnectionString(0)
			if !strings.HasPrefix(cs, "DefaultEndpointsProtocol=https;") || !strings.Contains(cs, "TableEndpoint=https://") {
				t.Fatalf("connection string %s", cs)
			}
			svc, err := aztables.NewServiceClientFromConnectionString(cs, tlsOptions(cert.pool, ""))
			if err != nil {
				t.Fatal(err)
			}
			roundTrip(t, svc, "https"+strings.ToLower(tc.name)+newSuffix())
		})
	}
	t.Run("BadBundle", func(t *testing.T) {
		fcfg := frontend.DefaultConfig()
		fcfg.CertFile, fcfg.CertPassword = cert.pfx, "wrong"
		if _, err := frontend.NewServer(fcfg, tc.Frontends[0].Router, nil); err == nil || !strings.Contains(err.Error(), "cert.pfx") {
			t.Fatalf("wrong password: %v", err)
		}
		fcfg.CertFile, fcfg.CertPassword, fcfg.KeyFile = cert.certPEM, "", ""
		if err := fcfg.Validate(); err == nil {
			t.Fatal("a PEM cert without a key was accepted")
		}
	})
}

// staticToken is a TokenCredential handing out one JWT.
type staticToken string

func (s staticToken) GetToken(context.Context, policy.TokenRequestOptions) (azcore.AccessToken, error) {
	return azcore.AccessToken{Token: string(s), ExpiresOn: time.Now().Add(time.Hour)}, nil
}

// jwt builds an unsigned-looking token with claims (the basic level does
// not check signatures).
func jwt(t *testing.T, claims map[string]any) string {
	t.Helper()
	enc := func(v any) string { return base64.RawURLEncoding.EncodeToString(mustJSON(t, v)) }
	return enc(map[string]string{"alg": "RS256", "typ": "JWT"}) + "." + enc(claims) + "." + base64.RawURLEncoding.EncodeToString([]byte("signature"))
}

func tokenClaims(aud string, expires time.Time) map[string]any {
	now := time.Now()
	return map[string]any{"aud": aud, "iss": "https://sts.windows.net/ab1f708d-50f6-404c-a006-d71b2ac7a606/",
		"iat": now.Add(-time.Minute).Unix(), "nbf": now.Add(-time.Minute).Unix(), "exp": expires.Unix(), "oid": "11059fcc"}
}

func TestOAuthBasic(t *testing.T) {
	cert := newTestCert(t)
	n := startFrontend(t, func(c *frontend.Config) {
		c.CertFile, c.KeyFile, c.OAuth = cert.certPEM, cert.keyPEM, "basic"
	})
	ep := "https://" + n.Addr + "/" + auth.DevAccountName
	client := func(token string) *aztables.ServiceClient {
		svc, err := aztables.NewServiceClient(ep, staticToken(token), tlsOptions(cert.pool, ""))
		if err != nil {
			t.Fatal(err)
		}
		return svc
	}
	hour := time.Now().Add(time.Hour)
	for _, aud := range []string{"https://storage.azure.com", "https://storage.azure.com/", "e406a681-f3d4-42a8-90b6-c2b029497af1",
		"https://devstoreaccount1.table.core.windows.net", ep} {
		t.Run("Audience "+aud, func(t *testing.T) {
			roundTrip(t, client(jwt(t, tokenClaims(aud, hour))), "oauth"+newSuffix())
		})
	}
	t.Run("Refused", func(t *testing.T) {
		wrongIssuer := tokenClaims("https://storage.azure.com", hour)
		wrongIssuer["iss"] = "https://evil.example/"
		noExp := tokenClaims("https://storage.azure.com", hour)
		delete(noExp, "exp")
		for name, token := range map[string]string{
			"expired":        jwt(t, tokenClaims("https://storage.azure.com", time.Now().Add(-time.Minute))),
			"other audience": jwt(t, tokenClaims("https://vault.azure.net", hour)),
			"other account":  jwt(t, tokenClaims("https://someoneelse.table.core.windows.net", hour)),
			"other issuer":   jwt(t, wrongIssuer),
			"no exp":         jwt(t, noExp),
			"not a JWT":      "opaque-token",
		} {
			_, err := client(token).CreateTable(context.Background(), "oauthrefused", nil)
			if st, code := respCode(err); st != 401 || code != "InvalidAuthenticationInfo" {
				t.Errorf("%s: %d %s (%v)", name, st, code, err)
			}
		}
	})
	t.Run("NotOnACLs", func(t *testing.T) {
		svc := client(jwt(t, tokenClaims("https://storage.azure.com", hour)))
		name := "oauthacl" + newSuffix()
		if _, err := svc.CreateTable(context.Background(), name, nil); err != nil {
			t.Fatal(err)
		}
		_, err := svc.NewClient(name).GetAccessPolicy(context.Background(), nil)
		wantCode(t, err, 403, "AuthorizationFailure")
	})
	t.Run("BearerOverHTTP", func(t *testing.T) {
		// The shared front-end has OAuth off and no TLS: a bearer token is
		// not a credential there.
		r := raw(t, "GET", "/Tables", jsonHeaders("Authorization", "Bearer "+jwt(t, tokenClaims("https://storage.azure.com", hour))), nil, false)
		if r.status != 403 || r.code() != "AuthenticationFailed" {
			t.Fatalf("%d %s", r.status, r.code())
		}
	})
}

var suffixSeq int

// newSuffix makes table names unique across subtests.
func newSuffix() string {
	suffixSeq++
	return strings.ReplaceAll(time.Now().Format("150405.000"), ".", "") + string(rune('a'+suffixSeq%26))
}

// The multi-account cluster: its first front-end starts with the default
// account and creates a table; a second front-end then starts with
// AZURITE_ACCOUNTS, which it publishes to the master, and from then on both
// serve exactly those accounts.
var multi struct {
	once sync.Once
	c    *cluster.Cluster
	fe   *cluster.FrontendNode // started with the accounts
	err  error
}

func multiKey(s string) string {
	return base64.StdEncoding.EncodeToString([]byte(s + strings.Repeat("k", 32)))
}

var (
	multiK1, multiK2, multiK3 = multiKey("one-1"), multiKey("one-2"), multiKey("two-1")
	// multiAccounts is acctone (two keys) and accttwo; the front-end's
	// AZURITE_ACCOUNTS also keeps devstoreaccount1.
	multiAccounts = "acctone:" + multiK1 + ":" + multiK2 + ";accttwo:" + multiK3
)

func multiCluster(t *testing.T) (*cluster.Cluster, *cluster.FrontendNode) {
	t.Helper()
	multi.once.Do(func() {
		multi.c, multi.err = cluster.Start(cluster.Options{Masters: 1, Servers: 3, Frontends: 1, DataDir: filepath.Join(dataDir, "multi"), Logger: logging.FromEnv("")})
		if multi.err != nil {
			return
		}
		closers = append(closers, multi.c.Close)
		dev, err := aztables.NewServiceClientWithSharedKey(multi.c.Endpoint(0), cred, clientOptions())
		if err == nil {
			_, err = dev.CreateTable(context.Background(), "legacy", nil)
		}
		if err == nil {
			_, err = dev.NewClient("legacy").AddEntity(context.Background(), []byte(`{"PartitionKey":"p","RowKey":"r"}`), nil)
		}
		if err != nil {
			multi.err = err
			return
		}
		fcfg, rcfg := frontend.DefaultConfig(), router.DefaultConfig()
		fcfg.HTTPAddr, rcfg.Masters = "127.0.0.1:0", multi.c.MasterAddrs()
		fcfg.Accounts = auth.DevAccountName + ":" + auth.DevAccountKey + ";" + multiAccounts
		if multi.fe, multi.err = cluster.StartFrontend(fcfg, rcfg, logging.FromEnv("")); multi.err == nil {
			closers = append(closers, multi.fe.Close)
		}
	})
	if multi.err != nil {
		t.Fatalf("multi-account cluster: %v", multi.err)
	}
	return multi.c, multi.fe
}

func TestAccounts(t *testing.T) {
	mc, fe := multiCluster(t)
	// The first front-end was started without accounts: it serves the
	// master's registry, which the second one published.
	plain := mc.Frontends[0].Addr
	k1, k2, k3 := multiK1, multiK2, multiK3
	opts := clientOptions()
	svcAt := func(addr, account, k string) *aztables.ServiceClient {
		cred, err := aztables.NewSharedKeyCredential(account, k)
		if err != nil {
			t.Fatal(err)
		}
		svc, err := aztables.NewServiceClientWithSharedKey("http://"+addr+"/"+account, cred, opts)
		if err != nil {
			t.Fatal(err)
		}
		return svc
	}
	svcFor := func(account, k string) *aztables.ServiceClient { return svcAt(plain, account, k) }
	ctx := context.Background()
	one1, one2, two := svcFor("acctone", k1), svcFor("acctone", k2), svcFor("accttwo", k3)

	t.Run("Replicated", func(t *testing.T) {
		// Written through one front-end, read through the other: both
		// serve the registry.
		roundTrip(t, svcAt(fe.Addr, "acctone", k1), "replicated")
		if _, err := one2.NewClient("replicated").GetEntity(ctx, "p", "r", nil); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("BothKeys", func(t *testing.T) {
		roundTrip(t, one1, "keyone")
		c := one2.NewClient("keyone")
		if _, err := c.GetEntity(ctx, "p", "r", nil); err != nil {
			t.Fatalf("second key: %v", err)
		}
		// SharedKey (not Lite) and a service SAS signed with the second key.
		acct2, _ := auth.NewAccount("acctone", k2)
		req, _ := http.NewRequest("GET", "http://"+plain+"/acctone/Tables", nil)
		req.Header.Set("x-ms-version", "2019-02-02")
		req.Header.Set("Accept", "application/json;odata=nometadata")
		if err := auth.SignSharedKey(req, acct2); err != nil {
			t.Fatal(err)
		}
		resp, err := checker.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("SharedKey with the second key: %d", resp.StatusCode)
		}
		q, err := auth.ServiceSAS{Table: "keyone", Permissions: "r", Expiry: time.Now().Add(time.Hour)}.Encode(acct2)
		if err != nil {
			t.Fatal(err)
		}
		sc, err := aztables.NewClientWithNoCredential("http://"+plain+"/acctone/keyone?"+q.Encode(), opts)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sc.GetEntity(ctx, "p", "r", nil); err != nil {
			t.Fatalf("SAS with the second key: %v", err)
		}
	})

	t.Run("Isolated", func(t *testing.T) {
		// The same name in two accounts is two tables.
		roundTrip(t, two, "keyone")
		if _, err := two.NewClient("keyone").DeleteEntity(ctx, "p", "r", nil); err != nil {
			t.Fatal(err)
		}
		if _, err := one1.NewClient("keyone").GetEntity(ctx, "p", "r", nil); err != nil {
			t.Fatalf("a delete in accttwo reached acctone: %v", err)
		}
		names := func(svc *aztables.ServiceClient) []string {
			var out []string
			p := svc.NewListTablesPager(nil)
			for p.More() {
				page, err := p.NextPage(ctx)
				if err != nil {
					t.Fatal(err)
				}
				for _, tb := range page.Tables {
					out = append(out, *tb.Name)
				}
			}
			return out
		}
		if _, err := one1.CreateTable(ctx, "onlyinone", nil); err != nil {
			t.Fatal(err)
		}
		for _, n := range names(two) {
			if n == "onlyinone" || n == "legacy" || strings.Contains(n, "/") {
				t.Fatalf("accttwo lists %q", n)
			}
		}
		_, err := two.NewClient("onlyinone").GetEntity(ctx, "p", "r", nil)
		wantCode(t, err, 404, "TableNotFound")
		_, err = one1.NewClient("legacy").GetEntity(ctx, "p", "r", nil)
		wantCode(t, err, 404, "TableNotFound")
		// devstoreaccount1's table from before the accounts stays its own.
		dev := svcFor(auth.DevAccountName, auth.DevAccountKey)
		if _, err := dev.NewClient("legacy").GetEntity(ctx, "p", "r", nil); err != nil {
			t.Fatalf("devstoreaccount1's existing data: %v", err)
		}
		for _, n := range names(dev) {
			if n == "onlyinone" || strings.Contains(n, "/") {
				t.Fatalf("devstoreaccount1 lists %q", n)
			}
		}
	})

	t.Run("ServicePropertiesPerAccount", func(t *testing.T) {
		// acctone's CORS rules are its own: accttwo's and devstoreaccount1's
		// preflights are refused and their properties show none, through
		// either front-end.
		rule := &aztables.CorsRule{AllowedOrigins: to.Ptr("http://one.example"), AllowedMethods: to.Ptr("GET,PUT"),
			AllowedHeaders: to.Ptr("x-ms-*"), ExposedHeaders: to.Ptr("x-ms-request-id"), MaxAgeInSeconds: to.Ptr(int32(30))}
		if _, err := one1.SetProperties(ctx, aztables.ServiceProperties{Cors: []*aztables.CorsRule{rule}}, nil); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if _, err := one1.SetProperties(ctx, aztables.ServiceProperties{Cors: []*aztables.CorsRule{}}, nil); err != nil {
				t.Errorf("clearing acctone's rules: %v", err)
			}
		})
		preflight := func(addr, account string) int {
			t.Helper()
			req, _ := http.NewRequest("OPTIONS", "http://"+addr+"/"+account+"/sometable()", nil)
			req.Header.Set("Origin", "http://one.example")
			req.Header.Set("Access-Control-Request-Method", "GET")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp.StatusCode
		}
		for _, addr := range []string{plain, fe.Addr} {
			// The other front-end learns the rules from the map: poll.
			deadline := time.Now().Add(10 * time.Second)
			for preflight(addr, "acctone") != http.StatusOK {
				if time.Now().After(deadline) {
					t.Fatalf("%s: acctone's preflight refused", addr)
				}
				time.Sleep(20 * time.Millisecond)
			}
			for _, account := range []string{"accttwo", "accttwo-secondary", auth.DevAccountName} {
				if st := preflight(addr, account); st != http.StatusForbidden {
					t.Errorf("%s: %s's preflight with acctone's rules: %d, want 403", addr, account, st)
				}
			}
		}
		dev := svcFor(auth.DevAccountName, auth.DevAccountKey)
		for name, svc := range map[string]*aztables.ServiceClient{"acctone": one2, "accttwo": two, "devstoreaccount1": dev, "accttwo on the other front-end": svcAt(fe.Addr, "accttwo", k3)} {
			got, err := svc.GetProperties(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if want := name == "acctone"; (len(got.Cors) == 1) != want {
				t.Errorf("%s's properties have %d CORS rules, want acctone's only on acctone", name, len(got.Cors))
			}
		}
	})

	t.Run("KeyOfAnotherAccount", func(t *testing.T) {
		// accttwo's key presented for acctone, and acctone's name signed
		// with accttwo's key, are both refused.
		cred, _ := aztables.NewSharedKeyCredential("accttwo", k3)
		other, err := aztables.NewServiceClientWithSharedKey("http://"+plain+"/acctone", cred, opts)
		if err != nil {
			t.Fatal(err)
		}
		_, err = other.CreateTable(ctx, "stolen", nil)
		wantCode(t, err, 403, "AuthenticationFailed")
		_, err = svcFor("acctone", k3).CreateTable(ctx, "stolen", nil)
		wantCode(t, err, 403, "AuthenticationFailed")
	})
}

func TestSwitches(t *testing.T) {
	ctx := context.Background()
	t.Run("ProductionStyleURL", func(t *testing.T) {
		n := startFrontend(t, func(*frontend.Config) {})
		_, port, _ := net.SplitHostPort(n.Addr)
		opts := clientOptions()
		tr := &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, n.Addr)
		}}
		opts.Transport = &http.Client{Transport: &headerChecker{next: tr}}
		prod, err := aztables.NewServiceClientWithSharedKey("http://devstoreaccount1.table.localhost:"+port+"/", cred, opts)
		if err != nil {
			t.Fatal(err)
		}
		roundTrip(t, prod, "prodstyle")
		sec, err := aztables.NewServiceClientWithSharedKey("http://devstoreaccount1-secondary.table.localhost:"+port+"/", cred, opts)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sec.GetStatistics(ctx, nil); err != nil {
			t.Fatalf("stats on the production-style secondary: %v", err)
		}
		// The same table through the path-style endpoint of the shared front-end.
		if _, err := svc.NewClient("prodstyle").GetEntity(ctx, "p", "r", nil); err != nil {
			t.Fatal(err)
		}

		off := startFrontend(t, func(c *frontend.Config) { c.HostStyle = false })
		_, port, _ = net.SplitHostPort(off.Addr)
		tr.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, off.Addr)
		}
		prod, _ = aztables.NewServiceClientWithSharedKey("http://devstoreaccount1.table.localhost:"+port+"/", cred, opts)
		_, err = prod.CreateTable(ctx, "prodstyleoff", nil)
		wantCode(t, err, 400, "InvalidUri")
	})
	t.Run("SkipAPIVersionCheck", func(t *testing.T) {
		n := startFrontend(t, func(c *frontend.Config) { c.SkipAPIVersionCheck = true })
		req, _ := http.NewRequest("GET", "http://"+n.Addr+"/devstoreaccount1/Tables", nil)
		req.Header.Set("x-ms-version", "invalid")
		req.Header.Set("Accept", "application/json;odata=nometadata")
		if err := auth.SignSharedKeyLite(req, acct); err != nil {
			t.Fatal(err)
		}
		resp, err := checker.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		var body map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != 200 || body["value"] == nil {
			t.Fatalf("%d %v", resp.StatusCode, body)
		}
	})
}
