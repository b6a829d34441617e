package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/rebill/rebill/platform/validate"
	"github.com/rebill/rebill/usecases"
)

// action is one state change a console form asks for.
type action struct {
	name     string // e.g. subscription.pause
	object   string // the id it acts on
	evidence string // what the person typed to justify it, if asked
	back     string // the page to return to
	// do runs the use case in tx and says what was done.
	do func(ctx context.Context, tx pgx.Tx, caller usecases.Caller) (string, error)
}

// validFormID: the random id formid renders (43 base64url characters);
// anything from 16 to 64 of them is accepted.
func validFormID(id string) bool {
	if len(id) < 16 || len(id) > 64 {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// act runs a once, keyed by the form's form_id, in one transaction with
// the record of it: the record is inserted first, so a second submission
// of the form, even one racing the first, waits on it and then finds it,
// and is shown the first one's result instead of acting again. A use case
// that refuses rolls everything back, record included.
func (h *Handler) act(w http.ResponseWriter, r *http.Request, a action) {
	s := sessionFrom(r.Context())
	formID := r.PostFormValue("form_id")
	if !validFormID(formID) {
		h.renderError(w, r, &s, http.StatusBadRequest, "This form has no valid form_id: reload the page and try again.")
		return
	}
	var evidence *string
	if a.evidence != "" {
		evidence = &a.evidence
	}
	var done, replayed bool
	var result, back string
	err := pgx.BeginFunc(r.Context(), h.opts.Pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(r.Context(), `INSERT INTO console_actions (form_id, key_id, role, action, object_id, evidence, redirect, at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (form_id) DO NOTHING`,
			formID, s.key.ID, string(s.key.Role), a.name, a.object, evidence, a.back, h.opts.Clock.Now())
		if err != nil {
			return fmt.Errorf("record console action: %w", err)
		}
		if tag.RowsAffected() == 0 {
			var keyID string
			if err := tx.QueryRow(r.Context(), `SELECT key_id, result, redirect FROM console_actions WHERE form_id = $1`, formID).
				Scan(&keyID, &result, &back); err != nil {
				return fmt.Errorf("read console action: %w", err)
			}
			if keyID != s.key.ID {
				return errForeignForm
			}
			replayed = true
			return nil
		}
		if result, err = a.do(r.Context(), tx, s.caller()); err != nil {
			return err
		}
		done = true
		back = a.back
		_, err = tx.Exec(r.Context(), `UPDATE console_actions SET result = $2 WHERE form_id = $1`, formID, result)
		return err
	})
	switch {
	case errors.Is(err, errForeignForm):
		h.renderError(w, r, &s, http.StatusForbidden, "Invalid form token: this form belongs to another key.")
		return
	case err != nil:
		h.refuse(w, r, a.back, err)
		return
	}
	if done || replayed {
		http.Redirect(w, r, withDone(back, formID), http.StatusSeeOther)
	}
}

var errForeignForm = errors.New("form of another key")

// refusedKey carries, in a request's context, the refusal a page shows
// above itself.
type refusedKey struct{}

// refuse answers an action that was refused on the page it came from
// (back): that page, as it is now, with the reason in its role=alert box
// and the refusal's status, rather than a page of its own at the POST's
// URL. Nothing was changed (the action's record was rolled back with
// it), so the page is shown as it is now; the browser's address stays the
// form's action, and reloading sends the same form again, which acts only
// if the object's state now allows it.
func (h *Handler) refuse(w http.ResponseWriter, r *http.Request, back string, err error) {
	ref := h.answer(w, r, err)
	target, perr := url.Parse(back)
	if perr != nil || !strings.HasPrefix(target.Path, "/console/") {
		s := sessionFrom(r.Context())
		h.fail(w, r, s, err)
		return
	}
	ctx := context.WithValue(r.Context(), refusedKey{}, ref)
	get := r.Clone(ctx)
	get.Method = http.MethodGet
	get.URL = &url.URL{Path: target.Path, RawPath: target.RawPath, RawQuery: target.RawQuery}
	get.RequestURI = get.URL.RequestURI()
	get.Body = http.NoBody
	get.ContentLength = 0
	get.Form, get.PostForm = nil, nil
	get.Header.Del("Content-Type")
	h.ServeHTTP(w, get)
}

// refusalOf is the refusal a page shows above itself, if any.
func refusalOf(ctx context.Context) (refusal, bool) {
	ref, ok := ctx.Value(refusedKey{}).(refusal)
	return ref, ok
}

func withDone(path, formID string) string {
	sep := "?"
	if strings.Contains(path, "?") {
		sep = "&"
	}
	return path + sep + "done=" + url.QueryEscape(formID)
}

// flash is the result of the session's key's action whose form was
// formID, shown once the action redirected back.
func (h *Handler) flash(ctx context.Context, s session, formID string) string {
	if !validFormID(formID) {
		return ""
	}
	var result string
	err := h.opts.Pool.QueryRow(ctx, `SELECT result FROM console_actions WHERE form_id = $1 AND key_id = $2`, formID, s.key.ID).Scan(&result)
	if err != nil {
		return ""
	}
	return result
}

// evidenceField reads a required free-text justification: what the API
// accepts in a text field (no control or bidirectional characters, no
// card number), 1..2000 characters.
func evidenceField(r *http.Request) (string, error) {
	v := strings.TrimSpace(r.PostFormValue("evidence"))
	if v == "" {
		return "", fmt.Errorf("%w: evidence is required: name the record that proves it (a gateway reference, a call, an email)", errInput)
	}
	if len([]rune(v)) > 2000 {
		return "", fmt.Errorf("%w: evidence must be at most 2000 characters", errInput)
	}
	if c, bad := validate.ForbiddenInText(v); bad {
		return "", fmt.Errorf("%w: evidence %s", errInput, validate.TextMessage(c))
	}
	if validate.LooksLikeCardNumber(v) {
		return "", fmt.Errorf("%w: evidence must not contain a card number", errInput)
	}
	return v, nil
}
