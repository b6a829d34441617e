// Package clientlive_test runs the Go client (module
// github.com/rebill/rebill/client) against real rebill nodes and checks its
// generated code against the served document. These tests live in the
// service's module, not the client's, so that the client's module needs
// nothing of the service: a consumer's go get pulls the client alone.
package clientlive_test
