package e2e_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/app"
	"github.com/rebill/rebill/charges/registry"
	"github.com/rebill/rebill/charges/registry/agentapi"
	"github.com/rebill/rebill/platform/mtls"
	"github.com/rebill/rebill/testkit/dbtest"
)

// testCA is a certificate authority that writes what it signs to dir.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	dir  string
}

func newTestCA(t *testing.T, dir, name string) testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	ca := testCA{cert: cert, key: key, dir: dir}
	ca.write(t, name+".pem", "CERTIFICATE", der)
	return ca
}

func (ca testCA) write(t *testing.T, name, kind string, der []byte) string {
	t.Helper()
	path := filepath.Join(ca.dir, name)
	require.NoError(t, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600))
	return path
}

// issue signs a server (127.0.0.1) or client certificate and returns the
// files of it and its key.
func (ca testCA) issue(t *testing.T, name string, server bool) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if server {
		tmpl.ExtKeyUsage, tmpl.IPAddresses = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	require.NoError(t, err)
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	require.NoError(t, err)
	return ca.write(t, name+".pem", "CERTIFICATE", der), ca.write(t, name+".key", "PRIVATE KEY", keyDER)
}

// startRegistryFake runs `rebill registryfake` with args and returns the
// address it listens on.
func startRegistryFake(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr lockedBuffer
	done := make(chan error, 1)
	go func() {
		done <- app.Run(ctx, append([]string{"rebill", "registryfake", "--addr", "127.0.0.1:0"}, args...),
			func(string) string { return "" }, &stdout, &stderr)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("registryfake did not stop")
		}
	})
	var addr string
	require.Eventually(t, func() bool {
		for _, l := range strings.Split(stderr.String(), "\n") {
			var line struct {
				Message, Addr, Scheme string
			}
			if json.Unmarshal([]byte(l), &line) == nil && line.Message == "registryfake listening" {
				require.Equal(t, "https", line.Scheme)
				addr = line.Addr
				return true
			}
		}
		return false
	}, 30*time.Second, 20*time.Millisecond, "no start line; stderr: %s", stderr.String())
	return addr
}

// rebill registryfake with --tls-cert, --tls-key and --client-ca serves
// the documented mutual TLS setup: rebill's certificate signed by the
// clients' CA gets through, none or another CA's is refused in the
// handshake (nothing done), and a production node posting with a wrong
// certificate logs a warning naming the registry gateway.
func TestRegistryFakeRequiresAClientCertificate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bankCA, clientsCA, strangerCA := newTestCA(t, dir, "bank-ca"), newTestCA(t, dir, "clients-ca"), newTestCA(t, dir, "stranger-ca")
	serverCert, serverKey := bankCA.issue(t, "server", true)
	addr := startRegistryFake(t, "--tls-cert", serverCert, "--tls-key", serverKey, "--client-ca", filepath.Join(dir, "clients-ca.pem"))
	rebillCert, rebillKey := clientsCA.issue(t, "rebill", false)
	wrongCert, wrongKey := strangerCA.issue(t, "wrong", false)

	client := func(files mtls.Files) *agentapi.Client {
		cfg, err := files.Config()
		require.NoError(t, err)
		c, err := agentapi.New(agentapi.Options{Name: "bank", BaseURL: "https://" + addr, TLS: cfg})
		require.NoError(t, err)
		return c
	}
	ctx := context.Background()
	good := client(mtls.Files{CertFile: rebillCert, KeyFile: rebillKey, CAFile: filepath.Join(dir, "bank-ca.pem")})
	p := registry.Payment{PaymentID: "p-tls-1", UIN: "18810142200817004923", Amount: 50000}
	require.NoError(t, good.Post(ctx, p))
	for name, files := range map[string]mtls.Files{
		"no client certificate":       {CAFile: filepath.Join(dir, "bank-ca.pem")},
		"a certificate of another CA": {CertFile: wrongCert, KeyFile: wrongKey, CAFile: filepath.Join(dir, "bank-ca.pem")},
	} {
		err := client(files).Post(ctx, registry.Payment{PaymentID: "p-tls-2", UIN: p.UIN, Amount: 1})
		require.ErrorIs(t, err, registry.ErrUnavailable, name)
	}
	status, err := registry.LookupStatus(ctx, good, "p-tls-2")
	require.NoError(t, err)
	require.Equal(t, registry.RegistryNotFound, status, "the refused posts did nothing")

	// A production node whose registry entry has a certificate the party
	// does not accept: the posting waits, and the log names the entry.
	pool := dbtest.Pool(t)
	simURL := startTestSim(t, pool.Config().ConnString())
	file := filepath.Join(t.TempDir(), "registries.yaml")
	require.NoError(t, os.WriteFile(file, []byte(`
- name: bank-mtls
  kind: http
  base_url: https://`+addr+`
  tls: {client_cert_file: `+wrongCert+`, client_key_file: `+wrongKey+`, ca_file: `+filepath.Join(dir, "bank-ca.pem")+`}
`), 0o600))
	env := noRegistryEnv(simURL)
	env["REBILL_REGISTRY_FILE"] = file
	prod := startNodeOn(t, pool, env, true)
	pb := prod.bundle(pool)
	enr := pb.createFinesEnrollment(t, "tok_ok", 500000)
	pb.call(t, http.MethodPost, "/v1/enrollments/"+enr+"/bills", dueFine(uin(78)))
	require.Eventually(t, func() bool {
		for _, l := range strings.Split(prod.log.String(), "\n") {
			var line struct {
				Level, Message, Registry string
			}
			if json.Unmarshal([]byte(l), &line) == nil && line.Level == "warn" && line.Registry == "bank-mtls" &&
				strings.Contains(line.Message, "certificate") {
				return true
			}
		}
		return false
	}, 30*time.Second, 50*time.Millisecond, "a warning naming the registry gateway; log: %s", prod.log.String())
}
