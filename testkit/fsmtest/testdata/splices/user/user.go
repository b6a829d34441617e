package user

import (
	"fmt"

	m "example.com/m/machine"
	"example.com/m/platform/fsm"
)

var (
	spliced   = "status = '" + string(m.Open) + "'"
	formatted = fmt.Sprintf("status <> '%s'", m.Closed)
	quoted    = "status IN (" + fsm.Quoted(m.Open) + ")"
	// Parameters and prose name no status in SQL.
	param = "status = $1"
	prose = "moved to " + string(m.Closed)
	other = "kind = '" + string(Open) + "'"
)

// Open is another package's constant of the same word.
const Open = "open"
