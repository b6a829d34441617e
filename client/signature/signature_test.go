package signature_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/client/signature"
)

const secret = "whsec_0123456789abcdef0123456789abcdef0123456789abcdef"

var body = []byte(`{"id":"evt_0192f3a4-5b6c-7d8e-9f01-23456789abcd","type":"charge.succeeded"}`)

// The vector README.md publishes: a receiver in any language can check its
// own implementation against it.
func TestVector(t *testing.T) {
	t.Parallel()
	at := time.Unix(1796112000, 0)
	require.Equal(t, "t=1796112000,v1=3497f791e9e30bc95a084e226573355590ace65e250c7a3d7a9c6a70c824b852",
		signature.Sign(secret, at, body))
}

func TestVerify(t *testing.T) {
	t.Parallel()
	at := time.Unix(1796112000, 0)
	header := signature.Sign(secret, at, body)
	tol := signature.DefaultTolerance
	for name, tc := range map[string]struct {
		header  string
		body    []byte
		now     time.Time
		secrets []string
		want    error
	}{
		"good":                        {header, body, at.Add(time.Minute), []string{secret}, nil},
		"either of two secrets held":  {header, body, at, []string{"whsec_new", secret}, nil},
		"body changed by one byte":    {header, append([]byte(" "), body...), at, []string{secret}, signature.ErrMismatch},
		"other secret":                {header, body, at, []string{"whsec_other"}, signature.ErrMismatch},
		"no secret":                   {header, body, at, nil, signature.ErrNoSecret},
		"empty secret is not a match": {header, body, at, []string{""}, signature.ErrMismatch},
		"too old":                     {header, body, at.Add(tol + time.Second), []string{secret}, signature.ErrTooOld},
		"from the future":             {header, body, at.Add(-tol - time.Second), []string{secret}, signature.ErrTooOld},
		"no t":                        {"v1=00", body, at, []string{secret}, signature.ErrBadHeader},
		"no v1":                       {"t=1796112000", body, at, []string{secret}, signature.ErrBadHeader},
		"v1 not hex":                  {"t=1796112000,v1=zz", body, at, []string{secret}, signature.ErrBadHeader},
		"part without =":              {header + ",junk", body, at, []string{secret}, signature.ErrBadHeader},
		"t not a number":              {"t=soon,v1=00", body, at, []string{secret}, signature.ErrBadHeader},
		"unknown scheme ignored":      {header + ",v0=abc", body, at, []string{secret}, nil},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			err := signature.Verify(tc.header, tc.body, tc.now, tol, tc.secrets...)
			if tc.want == nil {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, tc.want)
			}
		})
	}
}

// A rolled endpoint signs with both secrets; a receiver holding only the
// old one, or only the new one, accepts the delivery.
func TestSignAllRoll(t *testing.T) {
	t.Parallel()
	at := time.Unix(1796112000, 0)
	header := signature.SignAll([]string{"whsec_new", "whsec_old"}, at, body)
	require.NoError(t, signature.Verify(header, body, at, 0, "whsec_old"))
	require.NoError(t, signature.Verify(header, body, at, 0, "whsec_new"))
	require.ErrorIs(t, signature.Verify(header, body, at, 0, "whsec_gone"), signature.ErrMismatch)
}
