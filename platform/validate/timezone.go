package validate

import (
	"errors"
	"strings"
	"sync"
	"time"

	// Embed the IANA database so that a zone a client chose still resolves
	// on a host or container image without tzdata; a missing zone there
	// would otherwise reject valid requests or, worse, bill at the wrong
	// local midnight.
	_ "time/tzdata"
)

// ErrTimeZone is returned by [TimeZone] for anything that is not an IANA
// time zone name.
var ErrTimeZone = errors.New("must be an IANA time zone name such as Europe/Moscow or UTC")

// longest IANA name today is 32 bytes (America/Argentina/ComodRivadavia).
const maxZoneNameLen = 64

var zoneCache sync.Map // name -> *time.Location

// TimeZone resolves an IANA time zone name ("Europe/Moscow", "UTC"). A
// subscription's periods start at local midnight in its zone, so the name
// must mean the same on every node and after every restart.
//
// time.LoadLocation alone accepts too much for that: "" and "Local" give the
// server's own zone, and it reads any file below the system zoneinfo
// directory. So TimeZone takes only names shaped like IANA's (components of
// ASCII letters, digits, '_', '-' and '+', each starting with a letter) and
// refuses files that are in zoneinfo without being zones: posixrules,
// Factory, localtime, and the posix/ and right/ copies (right/ counts leap
// seconds, which Go's clock does not). The error is [ErrTimeZone].
func TimeZone(name string) (*time.Location, error) {
	if loc, ok := zoneCache.Load(name); ok {
		return loc.(*time.Location), nil
	}
	if !zoneNameShape(name) {
		return nil, ErrTimeZone
	}
	switch name {
	case "Local", "localtime", "posixrules", "Factory":
		return nil, ErrTimeZone
	}
	if strings.HasPrefix(name, "posix/") || strings.HasPrefix(name, "right/") {
		return nil, ErrTimeZone
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, ErrTimeZone
	}
	// Only names that loaded are cached, so the cache is bounded by the
	// size of the zone database whatever clients send.
	zoneCache.Store(name, loc)
	return loc, nil
}

func zoneNameShape(name string) bool {
	if name == "" || len(name) > maxZoneNameLen {
		return false
	}
	for part := range strings.SplitSeq(name, "/") {
		if part == "" || !isLetter(part[0]) {
			return false // also "", a leading or doubled '/', "." and ".."
		}
		for i := range len(part) {
			c := part[i]
			if !isLetter(c) && !isDigit(c) && c != '_' && c != '-' && c != '+' {
				return false
			}
		}
	}
	return true
}
