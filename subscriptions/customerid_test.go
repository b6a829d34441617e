package subscriptions_test

import (
	"strings"
	"testing"

	"github.com/rebill/rebill/rebilltype"
	"github.com/stretchr/testify/require"
)

// TestCustomerIDNeedsAVisibleCharacter: the rule subscriptions,
// enrollments and API keys share.
func TestCustomerIDNeedsAVisibleCharacter(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"", " ", "   ", "\t", "a\tb", "cust\u00e9", strings.Repeat("a", 256)} {
		require.False(t, rebilltype.ValidCustomerID(id), "%q", id)
	}
	for _, id := range []string{"cust-42", " a ", "-", strings.Repeat("a", 255)} {
		require.True(t, rebilltype.ValidCustomerID(id), "%q", id)
	}
}
