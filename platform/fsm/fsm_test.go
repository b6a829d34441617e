package fsm_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/platform/fsm"
)

type light string

const (
	red    light = "red"
	green  light = "green"
	yellow light = "yellow"
)

var lights = fsm.New("light", []light{red, green, yellow}, map[light][]light{
	red:    {green},
	green:  {yellow},
	yellow: {red},
})

func TestCanAndFrom(t *testing.T) {
	t.Parallel()
	require.True(t, lights.Can(red, green))
	require.False(t, lights.Can(green, red))
	require.False(t, lights.Can(red, red), "staying is not a move")
	require.False(t, lights.Can("blue", red), "an unknown status moves nowhere")
	require.Equal(t, []light{yellow}, lights.From(red))
	require.Equal(t, []light{red, green, yellow}, lights.Statuses())
	lights.Statuses()[0] = "blue"
	require.Equal(t, red, lights.Statuses()[0], "the machine's statuses cannot be changed through a copy")
}

func TestCheckRefusesTheFirstForbiddenOrigin(t *testing.T) {
	t.Parallel()
	require.NoError(t, lights.Check([]light{red}, green))
	err := lights.Check([]light{red, yellow, green}, green)
	require.EqualError(t, err, "light cannot move from yellow to green")
	require.Error(t, lights.Check([]light{green}, green), "staying is not a move the table allows")
	require.NoError(t, lights.Check(nil, green))
}

// Every machine's refusal is the one type, found through any wrapping.
func TestTransitionErrorIsOneType(t *testing.T) {
	t.Parallel()
	err := fmt.Errorf("pause: %w", lights.Refuse(red, yellow, "wait for green"))
	var te *fsm.TransitionError
	require.True(t, errors.As(err, &te))
	require.Equal(t, fsm.TransitionError{Machine: "light", From: "red", To: "yellow", Reason: "wait for green"}, *te)
	require.Equal(t, "pause: light cannot move from red to yellow: wait for green", err.Error())
}

func TestNewRefusesABrokenTable(t *testing.T) {
	t.Parallel()
	for name, build := range map[string]func(){
		"a status without a row": func() { fsm.New("l", []light{red, green}, map[light][]light{red: {green}}) },
		"a row of an unknown status": func() {
			fsm.New("l", []light{red}, map[light][]light{red: nil, green: nil})
		},
		"a move to an unknown status": func() { fsm.New("l", []light{red}, map[light][]light{red: {green}}) },
		"a move to itself":            func() { fsm.New("l", []light{red}, map[light][]light{red: {red}}) },
		"a status listed twice": func() {
			fsm.New("l", []light{red, red}, map[light][]light{red: nil})
		},
	} {
		require.Panics(t, build, name)
	}
}

func TestQuotedAndTexts(t *testing.T) {
	t.Parallel()
	require.Equal(t, "'red', 'green'", fsm.Quoted(red, green))
	require.Equal(t, "'it''s'", fsm.Quoted(light("it's")))
	require.Equal(t, []string{"red", "yellow"}, fsm.Texts([]light{red, yellow}))
}

// A move is built by its machine, which refuses what its table forbids:
// staying only where the store asks for it, a pass through a status in between only from one
// status, and a write within statuses moves nothing.
func TestMoveIsCheckedByItsMachine(t *testing.T) {
	t.Parallel()
	passing := fsm.New("light", []light{red, green, yellow}, map[light][]light{
		red:    {green},
		green:  {yellow},
		yellow: {red},
	}).Passing(red, green, yellow)

	_, err := passing.Move(green, red, green)
	require.Error(t, err, "staying is not a move")
	mv, err := passing.MoveOrStay(green, red, green)
	require.NoError(t, err)
	require.Equal(t, []light{red, green}, mv.From())
	require.Equal(t, green, mv.To())
	require.Empty(t, mv.Via())
	require.False(t, mv.Stays())

	mv, err = passing.Move(yellow, red)
	require.NoError(t, err)
	require.Equal(t, green, mv.Via(), "red -> yellow passes through green")
	_, err = passing.Move(yellow, red, green)
	var te *fsm.TransitionError
	require.ErrorAs(t, err, &te, "a pass is made from one status only")
	require.Equal(t, "red", te.From)
	_, err = lights.Move(yellow, red)
	require.ErrorAs(t, err, &te, "no pass without Passing")
	_, err = passing.Move(red, green)
	require.ErrorAs(t, err, &te)
	require.Equal(t, fsm.TransitionError{Machine: "light", From: "green", To: "red"}, *te)

	within := passing.Within(red, yellow)
	require.True(t, within.Stays())
	require.Equal(t, []light{red, yellow}, within.From())
	require.Panics(t, func() { lights.Passing(green, red, yellow) }, "a pass over a forbidden leg")
}
