package charges_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges"
)

// Every review code has a sentence for people, its own, that names no
// host, port, URL or Go error, and the OpenAPI document lists exactly the
// codes, in order.
func TestReviewCodes(t *testing.T) {
	t.Parallel()
	internal := regexp.MustCompile(`(?i)https?:|://|\d+\.\d+\.\d+\.\d+|localhost|:\d{2,5}\b|context deadline|dial tcp|%!|<nil>|\berror:`)
	seen := map[string]charges.ReviewCode{}
	for _, code := range charges.ReviewCodes {
		t.Run(string(code), func(t *testing.T) {
			require.Regexp(t, `^[a-z]+(_[a-z]+)*$`, string(code))
			s := code.Sentence()
			require.NotEmpty(t, s)
			require.NotRegexp(t, internal, s)
			require.NotContains(t, seen, s, "two codes, one sentence")
			seen[s] = code
		})
	}
	require.Len(t, seen, len(charges.ReviewCodes), "a code listed twice")

	data, err := os.ReadFile(filepath.Join("..", "api", "openapi.json"))
	require.NoError(t, err)
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Enum       []string `json:"enum"`
				Properties map[string]struct {
					Description string `json:"description"`
				} `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	require.NoError(t, json.Unmarshal(data, &doc))
	want := make([]string, len(charges.ReviewCodes))
	for i, c := range charges.ReviewCodes {
		want[i] = string(c)
	}
	require.Equal(t, want, doc.Components.Schemas["ReviewCode"].Enum)
	described := doc.Components.Schemas["Charge"].Properties["review_code"].Description
	for _, c := range charges.ReviewCodes {
		require.Contains(t, described, "`"+string(c)+"` ("+c.Sentence()+")", "the document gives each code its sentence")
	}
}

// A charge goes to review only with a code: outside reviewcode.go no
// statement of the module's Go code assigns review_reason, except to clear
// it with review_code on a retry and to append the hold check's note.
func TestReviewReasonIsSetOnlyWithItsCode(t *testing.T) {
	t.Parallel()
	assign := regexp.MustCompile(`review_reason\s*=\s*[^=]`)
	allowed := []string{
		"review_reason = NULL, review_code = NULL",                         // a retry's new attempt
		"review_reason = coalesce(review_reason, '') || ' (' || $3 || ')'", // the hold check's note
	}
	var found []string
	err := filepath.WalkDir("..", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		// zhkh's reports keep a review reason of their own, in their own
		// table, with no code.
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "client" || path == filepath.Join("..", "zhkh")) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") ||
			path == filepath.Join("..", "charges", "reviewcode.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, line := range strings.Split(string(src), "\n") {
			if loc := assign.FindStringIndex(line); loc != nil {
				rest := line[loc[0]:]
				if !slices.ContainsFunc(allowed, func(a string) bool { return strings.HasPrefix(rest, a) }) {
					found = append(found, path+": "+strings.TrimSpace(line))
				}
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.Empty(t, found, "review_reason set without review_code (use reviewSet and a ReviewCode)")
}

// The ways to review outside the pipeline's steps (which the step tests
// cover, each with its code) set their codes too: a fine's hold the
// registry refused, the inspector's verdict on a stuck charge, and the
// sweep of a charge whose job River discarded.
func TestEveryWayToReviewSetsItsCode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		code charges.ReviewCode
		send func(b *testBundle, c charges.Charge) error
	}{
		{"hold refused", charges.ReviewRegistryRejected, func(b *testBundle, c charges.Charge) error {
			return b.inStoreTx(ctx, t, func(tx pgx.Tx) error {
				_, err := b.pipeline.Store.HoldRefused(ctx, tx, c.ID, 1, charges.ReviewRegistryRejected, b.clock.Now())
				return err
			})
		}},
		{"inspector", charges.ReviewStuck, func(b *testBundle, c charges.Charge) error {
			return b.inStoreTx(ctx, t, func(tx pgx.Tx) error {
				_, err := b.pipeline.Store.ToReview(ctx, tx, b.client, b.get(ctx, t, c.ID), charges.ReviewStuck, b.clock.Now())
				return err
			})
		}},
		{"discarded job", charges.ReviewJobDiscarded, func(b *testBundle, c charges.Charge) error {
			if _, err := b.pool.Exec(ctx, `INSERT INTO river_job (args, kind, max_attempts, state, finalized_at)
				VALUES (jsonb_build_object('charge_id', $1::uuid, 'attempt', 1), 'charge_capture', 5, 'discarded', now())`, c.ID); err != nil {
				return err
			}
			return b.inStoreTx(ctx, t, func(tx pgx.Tx) error {
				moved, err := b.pipeline.Store.SweepDiscarded(ctx, tx, b.clock.Now())
				if err == nil && len(moved) != 1 {
					return fmt.Errorf("swept %d charges", len(moved))
				}
				return err
			})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			c := b.newCharge(ctx, t, fixture{status: charges.Authorized, authorizationRef: "auth_1"})
			require.NoError(t, tc.send(b, c))
			got := b.get(ctx, t, c.ID)
			require.Equal(t, charges.RequiresReview, got.Status)
			require.Equal(t, tc.code, got.ReviewCode)
			require.Equal(t, tc.code.Sentence(), got.ReviewReason)
			b.requireEvents(ctx, t, c.ID, charges.RequiresReview)
		})
	}
}
