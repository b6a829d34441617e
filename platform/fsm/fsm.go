// Package fsm is what every state machine of rebill shares: a table of
// allowed moves, the check a store makes before its guarded UPDATE, and
// the one error for a move the table forbids, so that the HTTP edge and
// the console answer every machine's refusal the same way.
//
// A machine's package keeps its own statuses, its table and the diagram
// in its doc; its store asks the machine before every status change and
// writes the change as an UPDATE guarded by the statuses it moves from.
package fsm

import (
	"fmt"
	"strings"

	"github.com/rebill/rebill/fault"
)

// Machine is one state machine's table of moves between statuses of
// type S. It is built once, at package initialisation, and never changed.
type Machine[S ~string] struct {
	name     string
	statuses []S
	moves    map[S][]S
	// passes are the moves a store makes in one statement through a
	// status in between (from, to -> via), each leg allowed on its own.
	passes map[[2]S]S
}

// New builds the machine name (what moves: "charge", "bill", ...) from
// its statuses, in the order of the life cycle, and moves, for every
// status the statuses it may move to. A table that lists a status not in
// statuses, or leaves one without a row, is a programming error: New
// panics, so that any test of the package fails.
func New[S ~string](name string, statuses []S, moves map[S][]S) *Machine[S] {
	known := make(map[S]bool, len(statuses))
	for _, s := range statuses {
		if known[s] {
			panic(fmt.Sprintf("fsm %s: status %s listed twice", name, s))
		}
		known[s] = true
	}
	if len(moves) != len(statuses) {
		panic(fmt.Sprintf("fsm %s: %d rows for %d statuses", name, len(moves), len(statuses)))
	}
	for from, tos := range moves {
		if !known[from] {
			panic(fmt.Sprintf("fsm %s: row of unknown status %s", name, from))
		}
		for _, to := range tos {
			if !known[to] || to == from {
				panic(fmt.Sprintf("fsm %s: move %s -> %s", name, from, to))
			}
		}
	}
	return &Machine[S]{name: name, statuses: statuses, moves: moves}
}

// Passing adds to the machine a move from from to to in one statement
// through via, each leg a move the table allows (an observer of the rows
// sees only the two ends), and returns the machine. It is called where
// the machine is built; a leg the table forbids panics, as New does.
func (m *Machine[S]) Passing(from, via, to S) *Machine[S] {
	if !m.Can(from, via) || !m.Can(via, to) {
		panic(fmt.Sprintf("fsm %s: pass %s -> %s -> %s", m.name, from, via, to))
	}
	if m.passes == nil {
		m.passes = map[[2]S]S{}
	}
	m.passes[[2]S{from, to}] = via
	return m
}

// Through reports the status a one-statement move from from to to passes
// through (Passing); ok is false when the machine makes no such move.
func (m *Machine[S]) Through(from, to S) (via S, ok bool) {
	via, ok = m.passes[[2]S{from, to}]
	return via, ok
}

// Move is one guarded move of a machine: a row in one of From goes to To
// (or, made by Within, keeps its status). Only the machine makes one, after
// its table allowed it, so that a store's guarded UPDATE, which takes a
// Move and writes status = To WHERE status = ANY(From), cannot write a
// change the table forbids: the check is here, once for every machine.
type Move[S ~string] struct {
	from []S
	to   S
	via  S
	stay bool
}

// From are the statuses the move's guard admits.
func (mv Move[S]) From() []S { return append([]S(nil), mv.from...) }

// To is the status the move writes; for a move that keeps the status
// (Within), the empty status.
func (mv Move[S]) To() S { return mv.to }

// Via is the status a one-statement move passes through, empty for none.
func (mv Move[S]) Via() S { return mv.via }

// Stays reports whether the move writes no status (Within).
func (mv Move[S]) Stays() bool { return mv.stay }

// Move is the move from any of from to to, or the refusal of the first
// status of from that the table does not let move to to. A move from one
// status that the table makes only through another (Passing) is allowed,
// and passes through it. Staying in to is not a move, and is refused.
func (m *Machine[S]) Move(to S, from ...S) (Move[S], error) {
	return m.move(to, from, false)
}

// MoveOrStay is Move for a store whose guarded write may also leave a row
// in to (a new attempt of a charge that was and stays scheduled): staying
// is allowed.
func (m *Machine[S]) MoveOrStay(to S, from ...S) (Move[S], error) {
	return m.move(to, from, true)
}

func (m *Machine[S]) move(to S, from []S, stay bool) (Move[S], error) {
	mv := Move[S]{from: append([]S(nil), from...), to: to}
	for _, f := range from {
		if (stay && f == to) || m.Can(f, to) {
			continue
		}
		via, ok := m.Through(f, to)
		if !ok || len(from) != 1 {
			return Move[S]{}, m.Refuse(f, to, "")
		}
		mv.via = via
	}
	return mv, nil
}

// Within is the guarded write of a row that keeps its status, one of in:
// no move, so nothing to check, but the same guard as a move's.
func (m *Machine[S]) Within(in ...S) Move[S] {
	return Move[S]{from: append([]S(nil), in...), stay: true}
}

// Name is what the machine moves.
func (m *Machine[S]) Name() string { return m.name }

// Statuses lists every status, in the order of the life cycle.
func (m *Machine[S]) Statuses() []S { return append([]S(nil), m.statuses...) }

// Can reports whether the table allows a move from from to to. Staying in
// the same status is not a move.
func (m *Machine[S]) Can(from, to S) bool {
	for _, s := range m.moves[from] {
		if s == to {
			return true
		}
	}
	return false
}

// Check is nil when the table allows a move to to from every status of
// from, and otherwise the refusal of the first that it does not: a store
// checks the statuses its guarded UPDATE moves from.
func (m *Machine[S]) Check(from []S, to S) error {
	for _, f := range from {
		if !m.Can(f, to) {
			return m.Refuse(f, to, "")
		}
	}
	return nil
}

// From lists, in the order of the life cycle, the statuses from which the
// table allows a move to to: the guard of an UPDATE that moves there.
func (m *Machine[S]) From(to S) []S {
	var out []S
	for _, s := range m.statuses {
		if m.Can(s, to) {
			out = append(out, s)
		}
	}
	return out
}

// Refuse is the error for a move from from to to that the table or a
// rule of the machine forbids; reason ("" for none) says which rule.
func (m *Machine[S]) Refuse(from, to S, reason string) *TransitionError {
	return &TransitionError{Machine: m.name, From: string(from), To: string(to), Reason: reason}
}

// TransitionError is a change a state machine forbids, whichever machine:
// callers tell them apart, when they need to, by Machine.
type TransitionError struct {
	Machine  string // what was to move: "charge", "subscription", "enrollment", "bill", ...
	From, To string
	Reason   string
}

func (e *TransitionError) Error() string {
	if e.Reason != "" {
		return fmt.Sprintf("%s cannot move from %s to %s: %s", e.Machine, e.From, e.To, e.Reason)
	}
	return fmt.Sprintf("%s cannot move from %s to %s", e.Machine, e.From, e.To)
}

// ErrorCode: a forbidden move conflicts with the object's state (409
// invalid-transition at the API).
func (*TransitionError) ErrorCode() fault.Code { return fault.Conflict }

// Texts returns statuses as strings, for a query's text[] parameter.
func Texts[S ~string](statuses []S) []string {
	out := make([]string, len(statuses))
	for i, s := range statuses {
		out[i] = string(s)
	}
	return out
}

// Quoted writes statuses as a list of SQL literals ('a', 'b'), for a
// condition that must match a partial index's predicate: the planner
// matches those against literals, not parameters. SQL builds such
// conditions from the constants, never from literals of its own.
func Quoted[S ~string](statuses ...S) string {
	out := make([]string, len(statuses))
	for i, s := range statuses {
		out[i] = "'" + strings.ReplaceAll(string(s), "'", "''") + "'"
	}
	return strings.Join(out, ", ")
}
