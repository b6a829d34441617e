package enrollments

import "github.com/rebill/rebill/vault"

// Tokens seals the payment tokens that enrollments hold in clear (rows written
// before the vault): the vault's TokenHolder for the enrollments table.
func Tokens() vault.TableTokens {
	return vault.TableTokens{Table: "enrollments", Gateway: "pm_gateway"}
}
