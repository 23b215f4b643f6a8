package pglink

import (
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
)

// URLProblem returns why PostgresURL cannot be parsed (as the
// Postgres store parses it, pool settings included), or "". The message
// never holds the URL or its password: pgx's "cannot parse `URL`: " prefix
// is cut off, and any password found in the URL is masked in what is left.
func URLProblem(raw string) string {
	_, err := pgxpool.ParseConfig(raw)
	if err == nil {
		return ""
	}
	msg := err.Error()
	const prefix = "cannot parse `"
	if rest, ok := strings.CutPrefix(msg, prefix); ok {
		if i := strings.Index(rest, "`: "); i >= 0 {
			msg = rest[i+len("`: "):]
		}
	}
	return maskPasswords(msg, raw)
}

// passwordParam matches a password given as a keyword (password=...) in a
// keyword/value string or a URL's query.
var passwordParam = regexp.MustCompile(`password\s*=\s*('((?:\\.|[^'\\])*)'?|[^\s&]+)`)

// maskPasswords replaces in msg every password raw seems to hold.
func maskPasswords(msg, raw string) string {
	var secrets []string
	add := func(s string) {
		s = strings.Trim(s, "'")
		if s != "" {
			secrets = append(secrets, s)
			if u, err := url.PathUnescape(s); err == nil && u != s {
				secrets = append(secrets, u)
			}
		}
	}
	if _, rest, ok := strings.Cut(raw, "://"); ok {
		if at := strings.LastIndexByte(rest, '@'); at >= 0 {
			if _, pw, ok := strings.Cut(rest[:at], ":"); ok {
				add(pw)
			}
		}
	}
	for _, m := range passwordParam.FindAllStringSubmatch(raw, -1) {
		add(m[1])
	}
	// Longest first, so that a password containing another is masked whole.
	slices.SortFunc(secrets, func(a, b string) int { return len(b) - len(a) })
	for _, s := range secrets {
		msg = strings.ReplaceAll(msg, s, "xxxxx")
	}
	return msg
}
