package config

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultConnectTimeout bounds each host's connection attempt when the URL
// sets no connect_timeout (nor PGCONNECT_TIMEOUT). Without a bound, a host
// that does not answer at all, a primary whose machine is gone, holds every
// new connection for the operating system's connect timeout (about two
// minutes on Linux) before the next host of a multi-host URL is tried,
// so the nodes would reach the promoted replica only that late. Five
// seconds is many times a connection's start on a loaded server.
const DefaultConnectTimeout = 5 * time.Second

// checkPostgresURL refuses, at start, a DATABASE_URL or REBILL_REPLICA_URL
// that the pool could not be opened with.
func checkPostgresURL(v string) error {
	_, err := ParsePoolConfig(v)
	return err
}

// ParsePoolConfig parses a DATABASE_URL or REBILL_REPLICA_URL value as the
// pool does, pgx's and pgxpool's own options (pool_max_conns,
// statement_cache_capacity...) included, so that Load refuses every value
// the pool would. The driver's parse error quotes the whole string,
// masking the password only where it recognises one: never in
// "password = secret", the keyword/value form with spaces around '=' that
// libpq accepts. So its error is never passed on: the one returned holds
// the driver's fixed reason and rebill's hint, no part of the value, and
// wraps nothing that does. The caller names the setting. A value that
// sets no connect_timeout gets DefaultConnectTimeout.
func ParsePoolConfig(v string) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(v)
	if err == nil {
		if cfg.ConnConfig.ConnectTimeout == 0 && !strings.Contains(v, "connect_timeout") {
			cfg.ConnConfig.ConnectTimeout = DefaultConnectTimeout
		}
		return cfg, nil
	}
	var pce *pgconn.ParseConfigError
	if !errors.As(err, &pce) {
		return nil, errors.New("cannot be parsed as a PostgreSQL URL or keyword/value string")
	}
	reason := parseReason(pce)
	return nil, fmt.Errorf("cannot be parsed: %s%s", reason, urlPartHint(v, reason))
}

// parseReason is the driver's reason, read from the error with its
// connection string emptied (so that no masking needs to be right).
// Words after a colon are dropped, as is the inner error when it quotes
// anything, holds a colon or repeats part of the string: each can carry a
// piece of the value ("unknown target_session_attrs value: ...",
// `parsing "..."`).
func parseReason(pce *pgconn.ParseConfigError) string {
	bare := *pce
	bare.ConnString = ""
	text, ok := strings.CutPrefix(bare.Error(), "cannot parse ``: ")
	if !ok {
		return "malformed"
	}
	if inner := pce.Unwrap(); inner != nil {
		text = strings.TrimSuffix(text, " ("+inner.Error()+")")
	}
	reason, _, _ := strings.Cut(text, ":")
	if strings.ContainsAny(reason, "\"'`") {
		return "malformed"
	}
	if inner := pce.Unwrap(); inner != nil {
		detail := inner.Error()
		if !strings.ContainsAny(detail, "\"'`:") && !strings.Contains(pce.ConnString, detail) {
			reason += " (" + detail + ")"
		}
	}
	return reason
}

// urlPartHint names the part of a postgres:// URL that is malformed, found
// by its shape only, or how to write a keyword/value string the driver
// could not split.
func urlPartHint(v, reason string) string {
	rest, ok := strings.CutPrefix(v, "postgres://")
	if !ok {
		if rest, ok = strings.CutPrefix(v, "postgresql://"); !ok {
			if strings.HasPrefix(reason, "failed to parse as keyword/value") {
				return "; in a keyword/value string quote a value holding spaces with '...'"
			}
			return ""
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
