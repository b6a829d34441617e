package client_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/client"
)

func newClient(t *testing.T, url, key string, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(url, key, opts...)
	require.NoError(t, err)
	return c
}

func ptr[T any](v T) *T { return &v }
