package validate

import (
	"reflect"
	"slices"
	"strings"
	"sync"
	"unicode"
)

// fieldInfo is what the walker needs to know about one JSON key of a struct.
type fieldInfo struct {
	typ reflect.Type
	// quoted marks a ",string" field, whose value sits inside a JSON string.
	quoted bool
}

var fieldCache sync.Map // reflect.Type -> map[string]fieldInfo

// structFields returns the JSON keys a struct accepts, resolved with the
// rules of encoding/json (tags, "-", promotion from embedded structs, and the
// shallowest or only tagged field winning a name clash), so the walker and
// the final decode agree on which keys exist.
func structFields(t reflect.Type) map[string]fieldInfo {
	if m, ok := fieldCache.Load(t); ok {
		return m.(map[string]fieldInfo)
	}
	m := computeFields(t)
	fieldCache.Store(t, m)
	return m
}

type candidate struct {
	name   string
	index  []int
	tagged bool
	info   fieldInfo
}

func computeFields(t reflect.Type) map[string]fieldInfo {
	type level struct {
		typ   reflect.Type
		index []int
	}
	var (
		fields    []candidate
		current   []level
		next      = []level{{typ: t}}
		count     map[reflect.Type]int
		nextCount = map[reflect.Type]int{}
		visited   = map[reflect.Type]bool{}
	)
	for len(next) > 0 {
		current, next = next, nil
		count, nextCount = nextCount, map[reflect.Type]int{}
		for _, f := range current {
			if visited[f.typ] {
				continue
			}
			visited[f.typ] = true
			for i := range f.typ.NumField() {
				sf := f.typ.Field(i)
				if sf.Anonymous {
					et := sf.Type
					if et.Kind() == reflect.Pointer {
						et = et.Elem()
					}
					if !sf.IsExported() && et.Kind() != reflect.Struct {
						continue
					}
				} else if !sf.IsExported() {
					continue
				}
				tag := sf.Tag.Get("json")
				if tag == "-" {
					continue
				}
				name, opts, _ := strings.Cut(tag, ",")
				if !validTagName(name) {
					name = ""
				}
				index := append(slices.Clip(f.index), i)
				ft := sf.Type
				if ft.Name() == "" && ft.Kind() == reflect.Pointer {
					ft = ft.Elem()
				}
				if name != "" || !sf.Anonymous || ft.Kind() != reflect.Struct {
					quoted := false
					if hasOption(opts, "string") {
						switch ft.Kind() {
						case reflect.Bool,
							reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
							reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
							reflect.Float32, reflect.Float64, reflect.String:
							quoted = true
						}
					}
					c := candidate{
						name:   name,
						index:  index,
						tagged: name != "",
						info:   fieldInfo{typ: sf.Type, quoted: quoted},
					}
					if c.name == "" {
						c.name = sf.Name
					}
					fields = append(fields, c)
					if count[f.typ] > 1 {
						// The same embedded type twice at one depth:
						// its fields annihilate each other below.
						fields = append(fields, c)
					}
					continue
				}
				nextCount[ft]++
				if nextCount[ft] == 1 {
					next = append(next, level{typ: ft, index: index})
				}
			}
		}
	}

	slices.SortStableFunc(fields, func(a, b candidate) int {
		if c := strings.Compare(a.name, b.name); c != 0 {
			return c
		}
		if len(a.index) != len(b.index) {
			return len(a.index) - len(b.index)
		}
		if a.tagged != b.tagged {
			if a.tagged {
				return -1
			}
			return 1
		}
		return slices.Compare(a.index, b.index)
	})

	out := make(map[string]fieldInfo, len(fields))
	for i := 0; i < len(fields); {
		j := i + 1
		for j < len(fields) && fields[j].name == fields[i].name {
			j++
		}
		group := fields[i:j]
		// The first candidate wins unless the next one is just as shallow
		// and just as tagged: then the name is ambiguous and dropped.
		if len(group) == 1 || len(group[0].index) < len(group[1].index) || group[0].tagged != group[1].tagged {
			out[group[0].name] = group[0].info
		}
		i = j
	}
	return out
}

func hasOption(opts, want string) bool {
	for opts != "" {
		var o string
		o, opts, _ = strings.Cut(opts, ",")
		if o == want {
			return true
		}
	}
	return false
}

// validTagName mirrors encoding/json: a tag name it would ignore must be
// ignored here too, or the walker would accept keys the decode rejects.
func validTagName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		switch {
		case strings.ContainsRune("!#$%&()*+-./:;<=>?@[]^_{|}~ ", c):
		case !unicode.IsLetter(c) && !unicode.IsDigit(c):
			return false
		}
	}
	return true
}
