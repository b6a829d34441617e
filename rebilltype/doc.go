// Package rebilltype holds the small types and rules that several layers
// share, so that none of them imports another only to name them: a payment
// method and its checks, the customer id rule, and the field errors that
// domain validation returns and the HTTP layer turns into a problem's
// `errors` list. Like River's rivertype it is a leaf: it imports nothing of
// rebill but the error vocabulary (fault), and holds no I/O, clock or
// database access.
package rebilltype
