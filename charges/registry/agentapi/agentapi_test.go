package agentapi_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
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

	"github.com/rebill/rebill/charges/registry"
	"github.com/rebill/rebill/charges/registry/agentapi"
	"github.com/rebill/rebill/charges/registry/testkit/agentfake"
	"github.com/rebill/rebill/charges/registry/testkit/registrytest"
	"github.com/rebill/rebill/platform/mtls"
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
type party struct {
	fake *agentfake.Fake
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

func startParty(t *testing.T) party {
	t.Helper()
	serverCA, clientCA, strangerCA := newAuthority(t, "bank CA"), newAuthority(t, "clients CA"), newAuthority(t, "stranger CA")
	serverCert, serverKey := serverCA.issue(t, "registry.bank.test", true)
	pair, err := tls.X509KeyPair(serverCert, serverKey)
	require.NoError(t, err)
	clients := x509.NewCertPool()
	clients.AddCert(clientCA.cert)

	fake := agentfake.New()
	srv := httptest.NewUnstartedServer(fake)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clients,
		MinVersion: tls.VersionTLS12}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes are the point
	srv.StartTLS()
	t.Cleanup(srv.Close)

	// The client's settings come from files, as REBILL_REGISTRY_FILE names them.
	dir := t.TempDir()
	ca := writeFile(t, dir, "bank-ca.pem", serverCA.pem)
	config := func(t *testing.T, files mtls.Files) *tls.Config {
		cfg, err := files.Config()
		require.NoError(t, err)
		return cfg
	}
	goodCert, goodKey := clientCA.issue(t, "rebill", false)
	wrongCert, wrongKey := strangerCA.issue(t, "rebill", false)
	return party{fake: fake, url: srv.URL,
		good: config(t, mtls.Files{CertFile: writeFile(t, dir, "rebill.pem", goodCert),
			KeyFile: writeFile(t, dir, "rebill.key", goodKey), CAFile: ca}),
		none: config(t, mtls.Files{CAFile: ca}),
		wrong: config(t, mtls.Files{CertFile: writeFile(t, dir, "wrong.pem", wrongCert),
			KeyFile: writeFile(t, dir, "wrong.key", wrongKey), CAFile: ca}),
	}
}

func (p party) client(t *testing.T, name string, cfg *tls.Config) *agentapi.Client {
	t.Helper()
	c, err := agentapi.New(agentapi.Options{Name: name, BaseURL: p.url, TLS: cfg})
	require.NoError(t, err)
	return c
}

// The HTTP adapter over the fake passes the registry gateways'
// conformance suite, over TLS with a client certificate: the export of a
// day's payments included.
func TestHTTPConformance(t *testing.T) {
	t.Parallel()
	registrytest.Run(t, func(t *testing.T) registrytest.Harness {
		p := startParty(t)
		set := func(change func(*agentfake.Faults)) {
			f := p.fake.Faults()
			change(&f)
			p.fake.SetFaults(f)
		}
		return registrytest.Harness{
			Gateway: p.client(t, "bank", p.good),
			PaidOutside: func(t *testing.T, uin string, amount int64) string {
				return p.fake.PaidOutside(uin, amount)
			},
			LoseAnswers: func(t *testing.T, on bool) { set(func(f *agentfake.Faults) { f.LoseAnswers = on }) },
			Unavailable: func(t *testing.T, on bool) { set(func(f *agentfake.Faults) { f.RateLimited = on }) },
			Processing:  func(t *testing.T, looks int) { set(func(f *agentfake.Faults) { f.Processing = looks }) },
			NoExport:    func(t *testing.T, on bool) { set(func(f *agentfake.Faults) { f.NoExport = on }) },
			Refused: map[string]registry.Gateway{
				"no client certificate":       p.client(t, "bank", p.none),
				"a certificate of another CA": p.client(t, "bank", p.wrong),
			},
		}
	})
}

// What each answer means to rebill, by status: the one place the
// protocol's statuses are mapped (see docs/registry.md).
func TestAnswersAreClassified(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		status  int
		body    string
		header  map[string]string
		want    error
		pending time.Duration
	}{
		"201 accepted":                  {status: 201, body: `{"payment_id": "p1", "status": "accepted"}`},
		"200 replay of an annulled one": {status: 200, body: `{"payment_id": "p1", "status": "annulled"}`, want: registry.ErrAnnulled},
		"202 processing":                {status: 202, body: `{"payment_id": "p1", "status": "processing"}`, header: map[string]string{"Retry-After": "30"}, want: registry.ErrUnknownOutcome, pending: 30 * time.Second},
		"429 did nothing":               {status: 429, header: map[string]string{"Retry-After": "5"}, want: registry.ErrUnavailable},
		"503 did nothing":               {status: 503, want: registry.ErrUnavailable},
		"500 may have done it":          {status: 500, want: registry.ErrUnknownOutcome},
		"504 may have done it":          {status: 504, want: registry.ErrUnknownOutcome},
		"422 refused for good":          {status: 422, body: `{"error": {"code": "uin_unknown", "message": "no such accrual"}}`, want: registry.ErrRejected},
		"409 id reused":                 {status: 409, body: `{"error": {"code": "payment_id_reused", "message": "x"}}`, want: registry.ErrRejected},
		"400 without the error body":    {status: 400, body: `<html>bad request</html>`, want: registry.ErrUnavailable},
		"401 a credential to fix":       {status: 401, want: registry.ErrUnavailable},
		"404 a base URL to fix":         {status: 404, body: `{"error": {"code": "not_found", "message": "x"}}`, want: registry.ErrUnavailable},
		"201 about another payment":     {status: 201, body: `{"payment_id": "p2", "status": "accepted"}`, want: registry.ErrUnknownOutcome},
		"200 not JSON":                  {status: 200, body: `ok`, want: registry.ErrUnknownOutcome},
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
			c, err := agentapi.New(agentapi.Options{Name: "bank", BaseURL: srv.URL, BearerToken: "tok-1"})
			require.NoError(t, err)
			err = c.Post(context.Background(), registry.Payment{PaymentID: "p1", UIN: "18810142200817004923", Amount: 500})
			if tc.want == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tc.want)
			pe, pending := registry.Pending(err)
			require.Equal(t, tc.pending > 0, pending)
			if pending {
				require.Equal(t, tc.pending, pe.RetryAfter)
			}
			require.NotContains(t, err.Error(), "tok-1", "the token is never in an error")
		})
	}
}

// A party that cannot be reached did nothing; one that does not answer in
// time may have done it.
func TestTransportFailures(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	c, err := agentapi.New(agentapi.Options{Name: "bank", BaseURL: "http://" + addr})
	require.NoError(t, err)
	err = c.Post(context.Background(), registry.Payment{PaymentID: "p1", UIN: "u", Amount: 1})
	require.ErrorIs(t, err, registry.ErrUnavailable, "connection refused")

	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-release }))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	c, err = agentapi.New(agentapi.Options{Name: "bank", BaseURL: srv.URL})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err = c.Post(ctx, registry.Payment{PaymentID: "p1", UIN: "u", Amount: 1})
	require.ErrorIs(t, err, registry.ErrUnknownOutcome, "sent, then no answer in time")
	ctx2, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel2()
	_, _, err = c.Lookup(ctx2, "p1")
	require.ErrorIs(t, err, registry.ErrUnavailable, "a read that fails did nothing")
}

// The registry's own verdict that an accrual is settled (a fine paid at
// its discount before the deadline) reaches rebill with the payments.
func TestSettledAccrualIsReported(t *testing.T) {
	t.Parallel()
	fake := agentfake.New()
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	c, err := agentapi.New(agentapi.Options{Name: "bank", BaseURL: srv.URL})
	require.NoError(t, err)
	const uin = "18810142200817004923"
	fake.PaidOutside(uin, 50000)
	q, err := c.Quittance(context.Background(), uin)
	require.NoError(t, err)
	require.False(t, q.Settled)
	require.Len(t, q.Payments, 1)
	fake.Settle(uin)
	q, err = c.Quittance(context.Background(), uin)
	require.NoError(t, err)
	require.True(t, q.Settled)
}

// The export is read page after page until the party gives no cursor,
// each payment once; an answer about another day is nothing learnt.
func TestExportFollowsPages(t *testing.T) {
	t.Parallel()
	fake := agentfake.New()
	fake.ExportPage = 2
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	c, err := agentapi.New(agentapi.Options{Name: "bank", BaseURL: srv.URL})
	require.NoError(t, err)
	ctx := context.Background()
	day := time.Now().UTC().Truncate(24 * time.Hour)
	var want []string
	for i := range 5 {
		id := fmt.Sprintf("page-%d", i)
		require.NoError(t, c.Post(ctx, registry.Payment{PaymentID: id, UIN: "18810142200817004923", Amount: 100}))
		want = append(want, id)
	}
	got, err := c.Export(ctx, day)
	if !time.Now().UTC().Truncate(24 * time.Hour).Equal(day) {
		t.Skip("the UTC day turned during the test")
	}
	require.NoError(t, err)
	ids := make([]string, len(got))
	for i, p := range got {
		ids[i] = p.PaymentID
	}
	require.Equal(t, want, ids, "five payments over three pages, in order, once each")

	wrong := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"date": "2001-01-01", "payments": []}`))
	}))
	t.Cleanup(wrong.Close)
	c, err = agentapi.New(agentapi.Options{Name: "bank", BaseURL: wrong.URL})
	require.NoError(t, err)
	_, err = c.Export(ctx, day)
	require.ErrorIs(t, err, registry.ErrUnavailable, "an export of another day")
}

// A call refused in the TLS handshake over a certificate is told to
// OnCertificateError (the node logs it naming the registry), once a
// minute however often postings ask again; a call that got through is
// not.
func TestCertificateErrorsAreTold(t *testing.T) {
	t.Parallel()
	p := startParty(t)
	for name, cfg := range map[string]*tls.Config{"no client certificate": p.none, "a certificate of another CA": p.wrong} {
		var told []error
		now := time.Date(2027, 3, 1, 10, 0, 0, 0, time.UTC)
		c, err := agentapi.New(agentapi.Options{Name: "bank", BaseURL: p.url, TLS: cfg, Now: func() time.Time { return now },
			OnCertificateError: func(err error) { told = append(told, err) }})
		require.NoError(t, err)
		for range 3 {
			require.ErrorIs(t, c.Post(context.Background(), registry.Payment{PaymentID: "p1", UIN: "18810142200817004923", Amount: 1}),
				registry.ErrUnavailable, name)
		}
		require.Len(t, told, 1, "%s: once a minute", name)
		require.Contains(t, told[0].Error(), "bank", name)
		now = now.Add(time.Minute)
		_, _, err = c.Lookup(context.Background(), "p1")
		require.ErrorIs(t, err, registry.ErrUnavailable)
		require.Len(t, told, 2, "%s: told again a minute later", name)
	}
	var told []error
	c, err := agentapi.New(agentapi.Options{Name: "bank", BaseURL: p.url, TLS: p.good, OnCertificateError: func(err error) { told = append(told, err) }})
	require.NoError(t, err)
	require.NoError(t, c.Post(context.Background(), registry.Payment{PaymentID: "p2", UIN: "18810142200817004923", Amount: 1}))
	require.Empty(t, told)
}
