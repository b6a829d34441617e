package app_test

import (
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The scan must be able to fail: on a fixture package it finds the
// writes and reads of others' tables (in any case, beside a CTE's name and
// FOR UPDATE OF), the exported fragment and the table named by a Go value,
// and lets alone an error's text, prose and EXTRACT(... FROM).
func TestOwnershipScanFindsStrayStatements(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("testdata/owners")
	require.NoError(t, err)
	uses, fragments, runtime := tableUses(t, root)
	var got []string
	for _, u := range uses {
		verb := "reads"
		if u.write {
			verb = "writes"
		}
		got = append(got, u.pkg+" "+verb+" "+u.table)
	}
	sort.Strings(got)
	require.Equal(t, []string{
		"stray reads bills",
		"stray reads charges",
		"stray reads enrollments",
		"stray writes charges",
		"stray writes events",
		"stray writes subscriptions",
	}, got)
	require.Equal(t, []string{"stray.ChargesSQL"}, fragments)
	require.Len(t, runtime, 1)
	require.True(t, strings.HasPrefix(runtime[0], "stray/stray.go "), runtime[0])
}
