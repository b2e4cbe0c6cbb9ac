package billing

import (
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// OpCancel cancels the subscription (contract §15): at the end of the
// period (it stays active until then, nothing is charged or refunded, and
// resume_subscription undoes it), or now (access ends now and cannot be
// undone; the unused time is credited to the customer's balance, never
// refunded). A scheduled change is replaced: released only if the
// cancellation is made, and put back otherwise.
const OpCancel Operation = "cancel_subscription"

// CancelReasons are the reasons a cancellation may give: Stripe's
// cancellation_details.feedback values.
var CancelReasons = []string{"customer_service", "low_quality", "missing_features", "other",
	"switched_service", "too_complex", "too_expensive", "unused"}

// maxCancelComment is the longest comment, in characters.
const maxCancelComment = 500

var cancelSubscription = &operation{
	name: OpCancel,
	offered: Offered{
		Path: "cancel", Title: "Cancel the subscription",
		About: "Cancel the organisation's subscription. With at: period_end it stays active until the end of the billing period, " +
			"then ends; nothing is charged or refunded and resume_subscription can undo it until then. With at: now access ends " +
			"immediately and cannot be undone; the unused time is credited to the account's balance (not refunded). " +
			"at is required: never choose now unless the user asked to end access now.",
		Args: []string{"at", "reason", "comment"}, Required: []string{"at"},
	},
	check: func(req ChangeRequest) error {
		switch {
		case req.To != "" || req.Quantity != 0:
			return Errorf(CodeInvalidRequest, `cancel_subscription takes "at", "reason" and "comment" only`)
		case req.At != AtNow && req.At != AtPeriodEnd:
			// Never a default: "now" ends access at once and cannot be undone.
			return Errorf(CodeInvalidRequest, `"at" must say when the subscription ends: "period_end" or "now"`)
		case req.Reason != "" && !slices.Contains(CancelReasons, req.Reason):
			return Errorf(CodeInvalidRequest, `"reason" must be one of %s`, strings.Join(CancelReasons, ", "))
		case utf8.RuneCountInString(req.Comment) > maxCancelComment || !printable(req.Comment):
			return Errorf(CodeInvalidRequest, `"comment" must be at most %d printable characters`, maxCancelComment)
		}
		return nil
	},
	target: func(c Catalog, sub Subscription, req ChangeRequest) (wanted, error) {
		plan, _ := c.Plan(sub.Plan) // Service.target checked it
		w := wanted{to: plan, seats: seats(sub.Quantity), cancellation: CancelNow}
		if req.atPeriodEnd() {
			w.cancellation = CancelAtPeriodEnd
		}
		return w, nil
	},
	fields: func(string, int64) (string, int64) { return "", 0 },
	words:  cancelWords,
}

// cancelWords is the summary of a cancellation: when access ends, what is
// credited or that nothing is, and whether it can be undone.
func cancelWords(orgName string, plan, _ Plan, t Terms) string {
	return cancelHead(orgName, plan, t) + feedbackWords(t)
}

// feedbackWords states what the cancellation tells Stripe in the
// customer's name: the reason and the comment ("" for neither).
func feedbackWords(t Terms) string {
	var parts []string
	if t.CancelReason != "" {
		parts = append(parts, "reason "+strings.ReplaceAll(t.CancelReason, "_", " "))
	}
	if t.CancelComment != "" { // printable (checked), and shown whole: it is sent whole
		parts = append(parts, fmt.Sprintf("comment %q", t.CancelComment))
	}
	if len(parts) == 0 {
		return ""
	}
	return " Sent to Stripe with it: " + strings.Join(parts, ", ") + "."
}

func cancelHead(orgName string, plan Plan, t Terms) string {
	if t.Cancellation == CancelAtPeriodEnd {
		return fmt.Sprintf("Cancel %s's %s subscription%s at the end of the current period: it stays active until %s, "+
			"then ends instead of renewing. Nothing is charged or refunded; it can be resumed until then.",
			orgName, plan.Name, seatsPhrase(t), day(t.NextChargeAt))
	}
	credit := "Nothing is credited."
	if t.CreditCents > 0 {
		credit = fmt.Sprintf("The unused time, about %s as of now, is credited to the account's balance for future invoices; "+
			"no money is paid back.", formatMoney(t.CreditCents, t.Currency))
	}
	return fmt.Sprintf("Cancel %s's %s subscription%s now: access ends immediately, instead of on %s, and this cannot be undone. %s",
		orgName, plan.Name, seatsPhrase(t), day(t.NextChargeAt), credit)
}

// printable reports whether s has no control or invisible characters.
func printable(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool {
		return unicode.IsControl(r) && r != '\n' || invisible(r)
	})
}
