package machine

import "example.com/m/platform/fsm"

type Status string

const (
	Open   Status = "open"
	Closed Status = "closed"
)

// The owner quotes its own statuses for a partial index's predicate.
var openSQL = "status IN (" + fsm.Quoted(Open, Closed) + ")"
