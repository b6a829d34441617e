package console

import (
	"bytes"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/rebill/rebill/apikeys"
	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/fault"
	"github.com/rebill/rebill/platform/validate"
	"github.com/rebill/rebill/rebilltype"
	"github.com/rebill/rebill/subscriptions/period"
)

// page is what every template gets.
type page struct {
	Title   string
	Session *session
	// Flash is the result of the action just done (role=status).
	Flash string
	// Alert is an error to show (role=alert).
	Alert string
	Data  any
	// RiverUI: link to /riverui/.
	RiverUI bool
}

// CSRF is the token every form of the page carries.
func (p page) CSRF() string {
	if p.Session == nil {
		return ""
	}
	return p.Session.csrf
}

// Admin reports whether the page is shown to an admin key.
func (p page) Admin() bool { return p.Session != nil && p.Session.key.Role == apikeys.Admin }

// Role and KeyID name the logged-in key.
func (p page) Role() string {
	if p.Session == nil {
		return ""
	}
	return string(p.Session.key.Role)
}

// KeyID is the logged-in key's id.
func (p page) KeyID() string {
	if p.Session == nil {
		return ""
	}
	return p.Session.key.ID
}

// Zone is the session's time zone name.
func (p page) Zone() string {
	if p.Session == nil || p.Session.timeZone == "" {
		return "UTC"
	}
	return p.Session.timeZone
}

// T shows a moment in the session's time zone with its UTC value beside;
// a nil time shows a dash.
func (p page) T(v any) template.HTML {
	var t time.Time
	switch x := v.(type) {
	case time.Time:
		t = x
	case *time.Time:
		if x == nil {
			return "—"
		}
		t = *x
	default:
		return "—"
	}
	if t.IsZero() {
		return "—"
	}
	utc := t.UTC().Format("2006-01-02 15:04:05") + " UTC"
	loc := time.UTC
	if p.Session != nil && p.Session.loc != nil {
		loc = p.Session.loc
	}
	attr := template.HTMLEscapeString(t.UTC().Format(time.RFC3339))
	if loc == time.UTC {
		return template.HTML(`<time datetime="` + attr + `">` + utc + `</time>`)
	}
	local := template.HTMLEscapeString(t.In(loc).Format("2006-01-02 15:04:05 MST"))
	return template.HTML(`<time datetime="` + attr + `">` + local + `</time> <span class="utc">(` + utc + `)</span>`)
}

// text shows a string that came from a customer, an issuer or a gateway:
// HTML-escaped, isolated in <bdi> so that it cannot reorder the text
// around it, and with every character that is invisible or acts on the
// text around it replaced by a visible marker naming its code point
// ([U+200B], see shownAsCode): such characters are how a string disguises
// what it says ("Trojan Source") or hides what it carries. Staff see that
// they were there. The API stores them (Persian, Indic scripts and emoji
// need some of them), so the console is where they are made visible.
func text(s string) template.HTML {
	runes := []rune(strings.ToValidUTF8(s, "\uFFFD"))
	inFlag := emojiTagSequences(runes)
	var b strings.Builder
	b.WriteString("<bdi>")
	start := 0
	for i, r := range runes {
		if inFlag[i] || !shownAsCode(runes, i) {
			continue
		}
		b.WriteString(template.HTMLEscapeString(string(runes[start:i])))
		fmt.Fprintf(&b, `<span class="cp">[U+%04X]</span>`, r)
		start = i + 1
	}
	b.WriteString(template.HTMLEscapeString(string(runes[start:])))
	b.WriteString("</bdi>")
	return template.HTML(b.String())
}

// shownAsCode reports whether runes[i] is shown as its code point: a
// bidirectional control, a control character other than tab and line
// feed, a line or paragraph separator, or an invisible character
// (invisible). The zero-width joiner and non-joiner stay as they are
// between two visible characters beyond ASCII, where emoji sequences,
// Persian and the Indic scripts use them; between Latin letters or next to
// a space they only split what looks like one word.
func shownAsCode(runes []rune, i int) bool {
	r := runes[i]
	switch {
	case unicode.Is(unicode.Bidi_Control, r), unicode.IsControl(r) && r != '\n' && r != '\t', r == '\u2028', r == '\u2029':
		return true
	case r == '\u200C' || r == '\u200D':
		return i == 0 || i == len(runes)-1 || !joins(runes[i-1]) || !joins(runes[i+1])
	}
	return invisible(r)
}

// joins reports whether a zero-width (non-)joiner next to r may be doing
// its work: r is visible and beyond ASCII.
func joins(r rune) bool {
	return r >= utf8.RuneSelf && !unicode.IsSpace(r) && !invisible(r) && !unicode.IsControl(r)
}

// invisible reports whether r draws nothing: Unicode's default-ignorable
// code points (format characters such as U+200B ZERO WIDTH SPACE, U+2060
// WORD JOINER, U+00AD SOFT HYPHEN, U+FEFF and the tag characters
// U+E0000..U+E007F; the Hangul fillers; U+034F), except those that draw
// or select a glyph: the variation selectors, and the format characters
// that are signs spanning digits (Prepended_Concatenation_Mark, e.g.
// U+0600 ARABIC NUMBER SIGN), interlinear annotation marks and Egyptian
// hieroglyph format controls (UAX #44, DerivedCoreProperties.txt,
// Default_Ignorable_Code_Point).
func invisible(r rune) bool {
	switch {
	case unicode.Is(unicode.Prepended_Concatenation_Mark, r), unicode.Is(unicode.Variation_Selector, r),
		'\uFFF9' <= r && r <= '\uFFFB', 0x13430 <= r && r <= 0x1343F:
		return false
	}
	return unicode.In(r, unicode.Cf, unicode.Other_Default_Ignorable_Code_Point)
}

// Emoji tag sequences (Unicode Technical Standard #51, ED-14a: a tag base,
// tag characters, U+E007F CANCEL TAG) draw the flags of subdivisions,
// England's 🏴 U+1F3F4 followed by the tags of "gbeng". Only that use is
// shown as it is: a waving black flag, 3 to 7 tags spelling a subdivision
// id in lower-case letters and digits (CLDR's unicode_subdivision_id: a
// region and a suffix of 1 to 4 characters), the cancel tag. Tag
// characters anywhere else spell text no one sees.
const (
	flagBase  = '\U0001F3F4'
	cancelTag = '\U000E007F'
	minTags   = 3
	maxTags   = 7
)

// emojiTagSequences marks the tag characters of runes that belong to a
// subdivision flag.
func emojiTagSequences(runes []rune) []bool {
	in := make([]bool, len(runes))
	for i := 0; i < len(runes); i++ {
		if runes[i] != flagBase {
			continue
		}
		j := i + 1
		for j < len(runes) && j-i-1 < maxTags && subdivisionTag(runes[j]) {
			j++
		}
		if tags := j - i - 1; tags < minTags || j == len(runes) || runes[j] != cancelTag {
			continue
		}
		for k := i + 1; k <= j; k++ {
			in[k] = true
		}
		i = j
	}
	return in
}

// subdivisionTag: a tag digit or a tag lower-case letter.
func subdivisionTag(r rune) bool {
	return 0xE0030 <= r && r <= 0xE0039 || 0xE0061 <= r && r <= 0xE007A
}

// money writes an amount in its currency's major unit: 150000 RUB is
// 1500.00 RUB, 1500 JPY is 1500 JPY.
func money(amount int64, currency string) string {
	units, ok := validate.Currency(currency)
	if !ok {
		units = 2
	}
	neg := amount < 0
	if neg {
		amount = -amount
	}
	digits := strconv.FormatInt(amount, 10)
	if units > 0 {
		for len(digits) <= units {
			digits = "0" + digits
		}
		digits = digits[:len(digits)-units] + "." + digits[len(digits)-units:]
	}
	if neg {
		digits = "-" + digits
	}
	return digits + " " + currency
}

// percent writes a rate (0.725) as 72.5 %.
func percent(f float64) string { return strconv.FormatFloat(f*100, 'f', 1, 64) + " %" }

func optMoney(amount *int64, currency string) string {
	if amount == nil {
		return "—"
	}
	return money(*amount, currency)
}

// args bundles the page with a value and a string for a partial template.
type args struct {
	P page
	V any
	S string
}

type outcome struct{ Value, Label string }

var funcs = template.FuncMap{
	"args":            func(p page, v any, s string) args { return args{P: p, V: v, S: s} },
	"offers":          offersFor,
	"nextcharge":      nextCharge,
	"resumedoes":      resumeDoes,
	"confirmoffered":  confirmOffered,
	"withdrawoffered": withdrawOffered,
	"paidelsewhere":   paidElsewhere,
	"retryoffered":    retryOffered,
	"resolveoffered":  resolveOffered,
	"refundoffer":     refundOfferFor,
	"refundreasons":   refundReasons,
	"intervals":       func() []period.Interval { return intervals },
	"prorations":      func() []outcome { return prorations },
	"pendingchange":   pendingChange,
	"whyinreview":     whyInReview,
	"lookupfound":     lookupFound,
	"ms":              ms,
	"gatewaystate":    gatewayState,
	"outcomes":        func() []outcome { return []outcome{{"succeeded", "Mark succeeded"}, {"failed", "Mark failed"}} },
	"text":            text,
	"money":           money,
	"optmoney":        optMoney,
	"formid":          randomID,
	"join":            strings.Join,
	"hasprefix":       strings.HasPrefix,
	"percent":         percent,
	"seg":             seg,
}

// seg writes an id as one segment of a console path, percent-encoded
// (url.PathEscape): an id is data, and unescaped its '/', '?', '#' or
// ".." would make a link or a form's action name another object (a bill
// id of "../../../charges/<id>/retry#" would turn Withdraw into a retry
// of that charge).
// The console routes on the escaped path and decodes each segment once
// (unescapeParams), so every id comes back as it was. An empty id, "."
// and ".." cannot be one segment: browsers remove dot segments even
// percent-encoded (WHATWG URL), so the page fails rather than write a
// link to somewhere else; rebill refuses such ids where they are made.
func seg(id any) (string, error) {
	var s string
	switch v := id.(type) {
	case string:
		s = v
	case fmt.Stringer:
		s = v.String()
	default:
		return "", fmt.Errorf("console: %T is not an id", id)
	}
	if s == "" || s == "." || s == ".." {
		return "", fmt.Errorf("console: %q cannot be a path segment", s)
	}
	return url.PathEscape(s), nil
}

// consolePath joins the console's path prefix with ids, each escaped as
// seg escapes it, for the links and redirects the handlers build.
func consolePath(segments ...string) string {
	var b strings.Builder
	b.WriteString("/console")
	for _, x := range segments {
		b.WriteByte('/')
		b.WriteString(url.PathEscape(x))
	}
	return b.String()
}

var (
	templatesOnce sync.Once
	templates     map[string]*template.Template
)

// parsed returns one template set per page: layout.html with the page's
// file, which defines "content".
func parsed() map[string]*template.Template {
	templatesOnce.Do(func() {
		templates = map[string]*template.Template{}
		names, err := fs.Glob(templateFiles, "templates/*.html")
		if err != nil {
			panic(err)
		}
		for _, name := range names {
			base := strings.TrimSuffix(strings.TrimPrefix(name, "templates/"), ".html")
			if base == "layout" || base == "partials" {
				continue
			}
			templates[base] = template.Must(template.New("layout.html").Funcs(funcs).
				ParseFS(templateFiles, "templates/layout.html", "templates/partials.html", name))
		}
	})
	return templates
}

// render writes a page; s is nil before login.
func (h *Handler) render(w http.ResponseWriter, r *http.Request, s *session, status int, name, title string, data any) {
	h.renderPage(w, r, status, name, page{Title: title, Session: s, Data: data, RiverUI: h.opts.RiverUI})
}

func (h *Handler) renderPage(w http.ResponseWriter, r *http.Request, status int, name string, p page) {
	t, ok := parsed()[name]
	if !ok {
		panic("console: no template " + name)
	}
	var buf bytes.Buffer
	if err := t.Execute(&buf, p); err != nil {
		h.opts.Logger.Error().Err(err).Str("template", name).Msg("console render")
		status = http.StatusInternalServerError
		buf.Reset()
		buf.WriteString("<!doctype html><title>Error</title><p role=\"alert\">The page could not be shown.</p>")
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		_, _ = w.Write(buf.Bytes())
	}
}

// renderError shows message in role=alert on the error page.
func (h *Handler) renderError(w http.ResponseWriter, r *http.Request, s *session, status int, message string) {
	if s != nil && s.idHash == nil {
		s = nil
	}
	title := http.StatusText(status)
	h.renderPage(w, r, status, "error", page{Title: title, Session: s, Alert: message, RiverUI: h.opts.RiverUI})
}

// fail shows what a use case refused on the error page, with the status
// the API would give.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, s session, err error) {
	a, refused := refusalOf(r.Context())
	if !refused {
		a = h.answer(w, r, err)
	} else {
		// The page a refused action came from cannot be shown (it is gone,
		// or the database is): the refusal is what the person must read.
		h.opts.Logger.Warn().Err(err).Str("path", r.URL.Path).Msg("console: page of a refused action")
	}
	if s.idHash == nil {
		h.renderPage(w, r, a.status, "error", page{Title: a.title, Alert: a.message, RiverUI: h.opts.RiverUI})
		return
	}
	h.renderPage(w, r, a.status, "error", page{Title: a.title, Session: &s, Alert: a.message, RiverUI: h.opts.RiverUI})
}

// refusal is how the console answers an error.
type refusal struct {
	status         int
	title, message string
}

// answer maps err (Explain), logs what is the operator's business and
// sets Retry-After as the API does.
func (h *Handler) answer(w http.ResponseWriter, r *http.Request, err error) refusal {
	_, fa := fault.AnswerTo(err)
	if errors.Is(err, charges.ErrGatewayUnreachable) {
		fa.Log, fa.RetryAfter = "", "5" // a gateway's outage, which the API answers the same way
	}
	status, message := Explain(err)
	if fa.Log != "" {
		h.opts.Logger.Error().Err(err).Str("path", r.URL.Path).Msg("console: " + fa.Log)
	}
	if after := retryAfter(err, fa); after != "" {
		w.Header().Set("Retry-After", after)
	}
	title := fa.Title
	if status != fa.Status {
		title = http.StatusText(status)
	}
	return refusal{status: status, title: title, message: message}
}

// retryAfter is the Retry-After of err's answer: the error's own wait
// when it says one.
func retryAfter(err error, a fault.Answer) string {
	var wait interface{ RetryAfterSeconds() int }
	if errors.As(err, &wait) {
		return strconv.Itoa(wait.RetryAfterSeconds())
	}
	return a.RetryAfter
}

// Explain is the status and the sentence staff are told for an error a
// page or an action meets: the status the API answers it with and the
// sentence of its code, both from the one table (fault.Answers), never an
// internal error's text. The few errors whose answer says more than their
// code are named here, as the API names them.
func Explain(err error) (int, string) {
	var fields rebilltype.Errors
	switch {
	case errors.As(err, &fields):
		msgs := make([]string, len(fields))
		for i, f := range fields {
			msgs[i] = f.Field + " " + f.Message
		}
		return http.StatusBadRequest, "Not done: " + strings.Join(msgs, "; ") + "."
	case errors.Is(err, errInput):
		return http.StatusBadRequest, "Not done: " + strings.TrimPrefix(err.Error(), errInput.Error()+": ") + "."
	case errors.Is(err, charges.ErrGatewayUnreachable):
		return http.StatusServiceUnavailable, "Not done: the payment gateway could not be asked what the charge's last attempt did, so nothing was done. Try again later."
	}
	_, a := fault.AnswerTo(err)
	return a.Status, a.Sentence(err)
}

var (
	errNotFound = fault.New(fault.NotFound, "not found")
	// errInput wraps what is wrong with a form's fields.
	errInput = fault.New(fault.Invalid, "bad input")
)
