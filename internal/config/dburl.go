package config

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// checkPostgresURL refuses a DATABASE_URL or REBILL_REPLICA_URL that the
// driver cannot parse, at start and with a message that holds no part of
// the value. pgconn masks the password of what it quotes only on a best
// effort basis (a malformed URL can make its boundaries ambiguous), and a
// detail of its inner error may quote a fragment of the string, so only
// its fixed reason is kept, with rebill's own hint on which part is wrong.
func checkPostgresURL(v string) error {
	_, err := pgconn.ParseConfig(v)
	if err == nil {
		return nil
	}
	var pce *pgconn.ParseConfigError
	if !errors.As(err, &pce) {
		return errors.New("cannot be parsed as a PostgreSQL URL or keyword/value string")
	}
	return fmt.Errorf("cannot be parsed: %s%s", parseReason(pce), urlPartHint(v))
}

// parseReason is pgconn's reason without the quoted connection string, and
// with its inner error only when that quotes nothing (its quoted parts are
// pieces of the value, a password's included).
func parseReason(pce *pgconn.ParseConfigError) string {
	text := pce.Error()
	if _, after, ok := strings.Cut(text, "`: "); ok {
		text = after
	} else {
		return "malformed"
	}
	if inner := pce.Unwrap(); inner != nil {
		detail := inner.Error()
		text = strings.TrimSuffix(text, " ("+detail+")")
		if !strings.ContainsAny(detail, "\"'`") && !strings.Contains(pce.ConnString, detail) {
			text += " (" + detail + ")"
		}
	}
	return text
}

// urlPartHint names the part of a postgres:// URL that is malformed, found
// by its shape only.
func urlPartHint(v string) string {
	rest, ok := strings.CutPrefix(v, "postgres://")
	if !ok {
		if rest, ok = strings.CutPrefix(v, "postgresql://"); !ok {
			return "; in a keyword/value string quote a value holding spaces with '...'"
		}
	}
	if i := strings.LastIndex(rest, "@"); i >= 0 {
		if userinfo := rest[:i]; strings.ContainsAny(userinfo, "/?# @") || strings.Count(userinfo, ":") > 1 {
			return "; the user or password holds a character that must be percent-encoded (/ ? # @ : space %)"
		}
	}
	if strings.ContainsAny(v, " \t\r\n") {
		return "; the URL holds whitespace (percent-encode it as %20)"
	}
	return ""
}
