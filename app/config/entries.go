package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"sigs.k8s.io/yaml"
)

// entryList reads a configuration file that lists named entries (the
// gateways, registries and bill sources files) the same way: YAML is
// converted to JSON first, so both obey the same field names and refuse
// the same unknown fields; every entry is checked, and the error has one
// line per fault, each naming the entry (by its name, or its position when
// it has none) and the field, so that one start reports them all.
type entryList[T any] struct {
	file   string // "gateways file"
	noun   string // "gateway": how an entry is named in messages
	plural string // "gateways"
	// parse decodes and checks one entry, returning every fault found and
	// the entry's name even on error.
	parse func(raw json.RawMessage) (T, string, []error)
	// across checks an entry (named where) against those before it; nil:
	// nothing to check.
	across func(entry T, where string) []error
}

func (l entryList[T]) read(raw []byte) ([]T, error) {
	data, err := yaml.YAMLToJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("%s is neither JSON nor YAML: %w", l.file, err)
	}
	var entries []json.RawMessage
	if err := json.NewDecoder(bytes.NewReader(data)).Decode(&entries); err != nil {
		return nil, fmt.Errorf("%s: want a list of %s: %w", l.file, l.plural, err)
	}
	if len(entries) == 0 {
		return nil, fmt.Errorf("%s: the list is empty", l.file)
	}
	out := make([]T, 0, len(entries))
	seen := map[string]int{}
	var errs []error
	for i, raw := range entries {
		entry, name, entryErrs := l.parse(raw)
		where := fmt.Sprintf("%s #%d", l.noun, i+1)
		if name != "" {
			where = fmt.Sprintf("%s %q", l.noun, name)
		}
		if l.across != nil {
			entryErrs = append(entryErrs, l.across(entry, where)...)
		}
		if first, dup := seen[name]; dup && name != "" {
			entryErrs = append(entryErrs, fmt.Errorf("name: already used by %s #%d", l.noun, first+1))
		} else {
			seen[name] = i
		}
		for _, err := range entryErrs {
			errs = append(errs, fmt.Errorf("%s: %w", where, err))
		}
		if len(entryErrs) == 0 {
			out = append(out, entry)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}
