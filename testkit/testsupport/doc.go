// Package testsupport holds the small helpers that tests across rebill
// wrote for themselves more than once: a clock that stands still until a
// test moves it, and a buffer that many goroutines may write logs to.
//
// It is imported by tests only; nothing in it touches a database or the
// network.
package testsupport
