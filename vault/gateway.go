package vault

import (
	"context"

	"github.com/rebill/rebill/charges/gateway"
)

// Gateway wraps g so that the token reference of each request is opened
// just before the call: the one place a token is in clear, besides the
// request that brought it. A request that carries the sealed token (read
// when its attempt started) is opened from it, without a read; any other
// is read from the vault. An error opening it comes back as the call's
// error before anything is sent, which the charge pipeline retries.
func (v *Vault) Gateway(g gateway.Gateway) gateway.Gateway {
	return &openingGateway{Gateway: g, vault: v}
}

type openingGateway struct {
	gateway.Gateway
	vault *Vault
}

func (o *openingGateway) open(ctx context.Context, req gateway.Request) (gateway.Request, error) {
	sealed := req.Sealed
	req.Sealed = ""
	if req.Token == "" {
		return req, nil
	}
	var token string
	var err error
	if sealed != "" {
		token, err = o.vault.OpenSealed(req.Token, sealed)
	} else {
		token, err = o.vault.Open(ctx, o.vault.Pool, req.Token)
	}
	req.Token = token
	return req, err
}

func (o *openingGateway) Authorize(ctx context.Context, req gateway.Request) (gateway.Result, error) {
	req, err := o.open(ctx, req)
	if err != nil {
		return gateway.Result{}, err
	}
	return o.Gateway.Authorize(ctx, req)
}

func (o *openingGateway) Capture(ctx context.Context, req gateway.Request) (gateway.Result, error) {
	req, err := o.open(ctx, req)
	if err != nil {
		return gateway.Result{}, err
	}
	return o.Gateway.Capture(ctx, req)
}

func (o *openingGateway) Void(ctx context.Context, req gateway.Request) (gateway.Result, error) {
	req, err := o.open(ctx, req)
	if err != nil {
		return gateway.Result{}, err
	}
	return o.Gateway.Void(ctx, req)
}

// Lookup opens the token of a lookup that may replay the hold it looks
// for: a provider that finds a lost create by sending it again with the
// same key must send it as it was first sent, with the card's token, not
// the vault's reference to it. Any other look-up keeps the reference, and
// loses the sealed token its request may carry: providers never get it.
func (o *openingGateway) Lookup(ctx context.Context, req gateway.LookupRequest) (gateway.Result, error) {
	if req.MayReplay && req.Op == gateway.OpAuthorize {
		var err error
		if req.Request, err = o.open(ctx, req.Request); err != nil {
			return gateway.Result{}, err
		}
	}
	req.Request.Sealed = ""
	return o.Gateway.Lookup(ctx, req)
}

// Refund sends a refund with no token: a refund names the captured
// payment, never the card, so nothing is opened and neither the reference
// nor the sealed token reaches the provider.
func (o *openingGateway) Refund(ctx context.Context, req gateway.Request) (gateway.Result, error) {
	req.Token, req.Sealed = "", ""
	return o.Gateway.Refund(ctx, req)
}
