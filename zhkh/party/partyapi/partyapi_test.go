package partyapi_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/platform/mtls"
	"github.com/rebill/rebill/zhkh/party"
	"github.com/rebill/rebill/zhkh/party/partyapi"
	"github.com/rebill/rebill/zhkh/party/testkit/partyfake"
	"github.com/rebill/rebill/zhkh/party/testkit/partytest"
)

// authority is a test certificate authority.
type authority struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newAuthority(t *testing.T, name string) authority {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return authority{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue signs a leaf certificate for a server (at 127.0.0.1) or a client
// and returns it and its key as PEM.
func (a authority) issue(t *testing.T, name string, server bool) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, &key.PublicKey, a.key)
	require.NoError(t, err)
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	require.NoError(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
}

// party is the fake behind a TLS server that requires a client certificate
// signed by its CA, and the TLS settings clients may use.
type bank struct {
	fake *partyfake.Fake
	url  string
	// good has rebill's certificate; none has no certificate; wrong has
	// one the party's CA did not sign.
	good, none, wrong *tls.Config
}

func writeFile(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(path, data, 0o600))
	return path
}

func startParty(t *testing.T) bank {
	t.Helper()
	serverCA, clientCA, strangerCA := newAuthority(t, "bank CA"), newAuthority(t, "clients CA"), newAuthority(t, "stranger CA")
	serverCert, serverKey := serverCA.issue(t, "zhkh.bank.test", true)
	pair, err := tls.X509KeyPair(serverCert, serverKey)
	require.NoError(t, err)
	clients := x509.NewCertPool()
	clients.AddCert(clientCA.cert)

	fake := partyfake.New()
	srv := httptest.NewUnstartedServer(fake)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clients,
		MinVersion: tls.VersionTLS12}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes are the point
	srv.StartTLS()
	t.Cleanup(srv.Close)

	// The client's settings come from files, as REBILL_ZHKH_PARTIES_FILE names them.
	dir := t.TempDir()
	ca := writeFile(t, dir, "bank-ca.pem", serverCA.pem)
	config := func(t *testing.T, files mtls.Files) *tls.Config {
		cfg, err := files.Config()
		require.NoError(t, err)
		return cfg
	}
	goodCert, goodKey := clientCA.issue(t, "rebill", false)
	wrongCert, wrongKey := strangerCA.issue(t, "rebill", false)
	return bank{fake: fake, url: srv.URL,
		good: config(t, mtls.Files{CertFile: writeFile(t, dir, "rebill.pem", goodCert),
			KeyFile: writeFile(t, dir, "rebill.key", goodKey), CAFile: ca}),
		none: config(t, mtls.Files{CAFile: ca}),
		wrong: config(t, mtls.Files{CertFile: writeFile(t, dir, "wrong.pem", wrongCert),
			KeyFile: writeFile(t, dir, "wrong.key", wrongKey), CAFile: ca}),
	}
}

func (p bank) client(t *testing.T, name string, cfg *tls.Config) *partyapi.Client {
	t.Helper()
	c, err := partyapi.New(partyapi.Options{Name: name, BaseURL: p.url, TLS: cfg})
	require.NoError(t, err)
	return c
}

func harness(t *testing.T, fake *partyfake.Fake, p party.Party) partytest.Harness {
	set := func(change func(*partyfake.Faults)) {
		f := fake.Faults()
		change(&f)
		fake.SetFaults(f)
	}
	return partytest.Harness{
		Party:       p,
		LoseAnswers: func(t *testing.T, on bool) { set(func(f *partyfake.Faults) { f.LoseAnswers = on }) },
		Unavailable: func(t *testing.T, on bool) { set(func(f *partyfake.Faults) { f.Down = on }) },
		Processing:  func(t *testing.T, looks int) { set(func(f *partyfake.Faults) { f.Processing = looks }) },
		Refuse:      func(t *testing.T, reason string) { set(func(f *partyfake.Faults) { f.Refuse = reason }) },
	}
}

// The HTTP adapter over the fake passes the parties' conformance suite
// over TLS with a client certificate; a party reached without rebill's
// certificate, or with another CA's, did nothing.
func TestMTLSConformance(t *testing.T) {
	t.Parallel()
	partytest.Run(t, func(t *testing.T) partytest.Harness {
		p := startParty(t)
		h := harness(t, p.fake, p.client(t, "bank", p.good))
		h.Refused = map[string]party.Party{
			"no client certificate":       p.client(t, "bank", p.none),
			"a certificate of another CA": p.client(t, "bank", p.wrong),
		}
		return h
	})
}

// The same over plain HTTP with a bearer token (a party on the loopback,
// as a local proxy would be); a wrong token did nothing.
func TestHTTPConformance(t *testing.T) {
	t.Parallel()
	partytest.Run(t, func(t *testing.T) partytest.Harness {
		fake := partyfake.New()
		fake.BearerToken = "tok-1"
		srv := httptest.NewServer(fake)
		t.Cleanup(srv.Close)
		c, err := partyapi.New(partyapi.Options{Name: "bank", BaseURL: srv.URL + "/v1", BearerToken: "tok-1"})
		require.NoError(t, err)
		wrong, err := partyapi.New(partyapi.Options{Name: "bank", BaseURL: srv.URL + "/v1", BearerToken: "tok-2"})
		require.NoError(t, err)
		h := harness(t, fake, c)
		h.Refused = map[string]party.Party{"a wrong bearer token": wrong}
		return h
	})
}

// What each answer to a report means to rebill, by status: the one place
// the protocol's statuses are mapped (see docs/registry.md).
func TestAnswersAreClassified(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		status  int
		body    string
		header  map[string]string
		want    error
		pending time.Duration
	}{
		"201 accepted":                  {status: 201, body: `{"report_id": "r1", "status": "accepted"}`},
		"200 replay of a cancelled one": {status: 200, body: `{"report_id": "r1", "status": "cancelled"}`, want: party.ErrCancelled},
		"200 replay of a refused one":   {status: 200, body: `{"report_id": "r1", "status": "refused", "reason": "x"}`, want: party.ErrRefused},
		"202 processing":                {status: 202, body: `{"report_id": "r1", "status": "processing"}`, header: map[string]string{"Retry-After": "30"}, want: party.ErrUnknownOutcome, pending: 30 * time.Second},
		"429 did nothing":               {status: 429, header: map[string]string{"Retry-After": "5"}, want: party.ErrUnavailable},
		"503 did nothing":               {status: 503, want: party.ErrUnavailable},
		"500 may have done it":          {status: 500, want: party.ErrUnknownOutcome},
		"504 may have done it":          {status: 504, want: party.ErrUnknownOutcome},
		"422 refused for good":          {status: 422, body: `{"error": {"code": "ipd_unknown", "message": "no such payment document"}}`, want: party.ErrRefused},
		"422 without the error body":    {status: 422, body: `<html>no</html>`, want: party.ErrUnavailable},
		"401 a credential to fix":       {status: 401, want: party.ErrUnavailable},
		"404 a base URL to fix":         {status: 404, want: party.ErrUnavailable},
		"201 about another report":      {status: 201, body: `{"report_id": "r2", "status": "accepted"}`, want: party.ErrUnknownOutcome},
		"200 not JSON":                  {status: 200, body: `ok`, want: party.ErrUnknownOutcome},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				require.Equal(t, "Bearer tok-1", r.Header.Get("Authorization"))
				for k, v := range tc.header {
					w.Header().Set(k, v)
				}
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
			}))
			t.Cleanup(srv.Close)
			c, err := partyapi.New(partyapi.Options{Name: "bank", BaseURL: srv.URL, BearerToken: "tok-1"})
			require.NoError(t, err)
			err = c.Report(context.Background(), party.Payment{ReportID: "r1", Account: "75ДА533315", BillID: "b1", Amount: 500,
				Currency: "RUB", PaidAt: time.Now()})
			if tc.want == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tc.want)
			pe, pending := party.Pending(err)
			require.Equal(t, tc.pending > 0, pending)
			if pending {
				require.Equal(t, tc.pending, pe.RetryAfter)
			}
			require.NotContains(t, err.Error(), "tok-1", "the token is never in an error")
		})
	}
}
