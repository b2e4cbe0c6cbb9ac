package webhooks

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Links makes the addresses of billingd's pages that a notification points
// to (billing.Service has them).
type Links interface {
	ApprovalURL(id string) string
	VerifyURL(id string) string
}

// eventData is what the outbox trigger records of an event (migration
// 000018), plus the links added when the body is made. Every field is
// optional: an event carries what it knows.
type eventData struct {
	ConfirmationID    string `json:"confirmation_id,omitempty"`
	Operation         string `json:"operation,omitempty"`
	Summary           string `json:"summary,omitempty"`
	Requester         string `json:"requester,omitempty"`
	Agent             string `json:"agent,omitempty"`
	Actor             string `json:"actor,omitempty"` // who caused the event (an approver, the requester)
	From              string `json:"from,omitempty"`
	To                string `json:"to,omitempty"`
	AmountDueNowCents *int64 `json:"amount_due_now_cents,omitempty"`
	Currency          string `json:"currency,omitempty"`
	ExpiresAt         string `json:"expires_at,omitempty"`
	ApprovalsGiven    *int   `json:"approvals_given,omitempty"`
	ApprovalsRequired *int   `json:"approvals_required,omitempty"`
	Reason            string `json:"reason,omitempty"`
	MandateID         string `json:"mandate_id,omitempty"`
	ConsentMethod     string `json:"consent_method,omitempty"`
	RequestID         string `json:"request_id,omitempty"`
	ApprovalURL       string `json:"approval_url,omitempty"`
	VerifyURL         string `json:"verify_url,omitempty"`
}

// isApproval reports whether t is an approval.* type.
func isApproval(t string) bool { return strings.HasPrefix(t, "approval.") }

// data decodes d's data and adds the links its type calls for; approval
// counts belong only to approval events.
func data(d Delivery, links Links) (eventData, error) {
	var ed eventData
	if err := json.Unmarshal(d.Data, &ed); err != nil {
		return eventData{}, fmt.Errorf("delivery %d: data: %w", d.ID, err)
	}
	if !isApproval(d.Type) {
		ed.ApprovalsGiven, ed.ApprovalsRequired = nil, nil
	}
	if ed.ConfirmationID != "" && links != nil {
		switch {
		case isApproval(d.Type):
			ed.ApprovalURL = links.ApprovalURL(ed.ConfirmationID)
		case d.Type == VerificationRequested:
			ed.VerifyURL = links.VerifyURL(ed.ConfirmationID)
		}
	}
	return ed, nil
}

// standardBody is the Standard Webhooks body of the contract:
// {"id","type","created","org","data"}. It depends only on the row, so
// every attempt sends the same bytes.
func standardBody(d Delivery, links Links) ([]byte, error) {
	ed, err := data(d, links)
	if err != nil {
		return nil, err
	}
	return json.Marshal(struct {
		ID      string    `json:"id"`
		Type    string    `json:"type"`
		Created int64     `json:"created"`
		Org     string    `json:"org"`
		Data    eventData `json:"data"`
	}{d.EventID, d.Type, d.CreatedAt.Unix(), d.Org, ed})
}

// slackBody is a Slack incoming-webhook message: text (the notification's
// fallback) and blocks in mrkdwn with the summary verbatim, who asks
// through which agent, the countdown and a button to the page where the
// person acts.
func slackBody(d Delivery, links Links, now time.Time) ([]byte, error) {
	ed, err := data(d, links)
	if err != nil {
		return nil, err
	}
	title := slackTitle(d.Type, ed)
	var lines []string
	lines = append(lines, "*"+slackEscape(title)+"*")
	if ed.Summary != "" {
		lines = append(lines, "> "+strings.ReplaceAll(slackEscape(ed.Summary), "\n", "\n> "))
	}
	var facts []string
	if ed.Requester != "" {
		who := "Asked by *" + slackEscape(ed.Requester) + "*"
		if ed.Agent != "" {
			who += " through agent *" + slackEscape(ed.Agent) + "*"
		}
		facts = append(facts, who)
	}
	if ed.ApprovalsRequired != nil && ed.ApprovalsGiven != nil {
		facts = append(facts, fmt.Sprintf("Approvals: %d of %d", *ed.ApprovalsGiven, *ed.ApprovalsRequired))
	}
	if exp, err := time.Parse(time.RFC3339, ed.ExpiresAt); err == nil && (d.Type == ApprovalRequested || d.Type == VerificationRequested) {
		facts = append(facts, "Expires "+slackDate(exp)+" ("+countdown(exp, now)+")")
	}
	if ed.Reason != "" && d.Type != ApprovalRequested {
		facts = append(facts, "Reason: "+slackEscape(ed.Reason))
	}
	blocks := []any{map[string]any{"type": "section", "text": map[string]string{"type": "mrkdwn", "text": strings.Join(lines, "\n")}}}
	if len(facts) > 0 {
		blocks = append(blocks, map[string]any{"type": "section", "text": map[string]string{"type": "mrkdwn", "text": strings.Join(facts, "\n")}})
	}
	if link, label := slackAction(d.Type, ed); link != "" {
		blocks = append(blocks, map[string]any{"type": "actions", "elements": []any{map[string]any{
			"type": "button", "text": map[string]string{"type": "plain_text", "text": label}, "url": link, "style": "primary"}}})
	}
	text := title
	if ed.Summary != "" {
		text += ": " + ed.Summary
	}
	return json.Marshal(map[string]any{"text": slackEscape(text), "blocks": blocks})
}

func slackTitle(t string, ed eventData) string {
	switch t {
	case ApprovalRequested:
		return "Approval needed"
	case ApprovalGranted:
		return "Approved by " + ed.Actor
	case ApprovalRejected:
		return "Rejected by " + ed.Actor
	case ApprovalExpired:
		return "Not approved in time: the change was rejected"
	case VerificationRequested:
		return "Sign in again to confirm"
	case ChangeExecuted:
		return "Plan changed"
	case ChangeScheduled:
		return "Plan change scheduled"
	case ChangeFailed:
		return "Plan change not made"
	case MandateUsed:
		return "Plan changed under a standing mandate"
	}
	return t
}

func slackAction(t string, ed eventData) (link, label string) {
	switch {
	case t == ApprovalRequested && ed.ApprovalURL != "":
		return ed.ApprovalURL, "Review and approve"
	case t == VerificationRequested && ed.VerifyURL != "":
		return ed.VerifyURL, "Sign in and confirm"
	}
	return "", ""
}

// slackEscape escapes the three characters Slack's mrkdwn gives meaning
// (&, <, >), so a name or summary can neither mention @channel nor make a
// link: the text shows as written.
func slackEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// slackDate shows t in each reader's own time zone, falling back to UTC.
func slackDate(t time.Time) string {
	return fmt.Sprintf("<!date^%d^{date_short_pretty} at {time}|%s>", t.Unix(), t.UTC().Format("Jan 2, 2006 15:04 UTC"))
}

// countdown says how long until t, from now.
func countdown(t, now time.Time) string {
	left := t.Sub(now)
	switch {
	case left <= 0:
		return "expired"
	case left < time.Minute:
		return "in less than a minute"
	case left < 2*time.Minute:
		return "in 1 minute"
	case left < 2*time.Hour:
		return fmt.Sprintf("in %d minutes", int(left/time.Minute))
	default:
		return fmt.Sprintf("in %d hours", int(left/time.Hour))
	}
}
