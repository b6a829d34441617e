package api_test

import "github.com/rebill/rebill/api/openapitest"

// Every exchange of this package's tests is checked against the OpenAPI
// document by the handler wrapper in harness_test.go (package
// api/openapitest). Tests that replay something the server never produced
// are named here.
func init() {
	openapitest.ExemptReplays("TestExpiredLeaseOfLiveRequestDoesNotRunTwice",
		`replays the idempotency record {"slow":true} that the test stored by hand`)
}
