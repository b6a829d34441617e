package charges

import "github.com/rebill/rebill/vault"

// Tokens seals the payment tokens that charges hold in clear (rows written
// before the vault): the vault's TokenHolder for the charges table.
func Tokens() vault.TableTokens { return vault.TableTokens{Table: "charges", Gateway: "gateway"} }
