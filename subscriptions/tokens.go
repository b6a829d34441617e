package subscriptions

import "github.com/rebill/rebill/vault"

// Tokens seals the payment tokens that subscriptions hold in clear (rows written
// before the vault): the vault's TokenHolder for the subscriptions table.
func Tokens() vault.TableTokens {
	return vault.TableTokens{Table: "subscriptions", Gateway: "pm_gateway"}
}
