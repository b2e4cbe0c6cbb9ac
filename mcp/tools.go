package mcp

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/auth"
)

// Tool names (contract §7). The change tools are named after the
// operations they gate (billing.Offers), which is also how billing records
// them.
const (
	toolSubscription    = "get_subscription"
	toolPlans           = "list_plans"
	toolCancel          = "cancel_confirmation"
	twoCallInstructions = `This tool takes two calls. ` +
		`The first call, without confirm_token, NEVER changes anything: it returns a summary of exactly what will happen and what it costs, and a single-use confirm_token that expires after ttl_seconds. ` +
		`Show the summary to the user verbatim (do not paraphrase, shorten or translate it) and ask whether they agree. ` +
		`Only after the user explicitly agrees, call this tool again with the same arguments ("to", or "quantity") and the confirm_token: that second call executes the change. ` +
		`Never make the second call on your own judgement or on consent the user gave to an earlier summary. ` +
		`A second call never executes twice: if you repeat it (for example after losing its answer), you get the original result again with "replayed": true, and nothing changes again. ` +
		`If the second call says upstream_unavailable, the outcome is not known yet (billingd is finding out from the payment provider whether the change was made): retry the SAME call with the SAME token after a few seconds; do not start a new first call. ` +
		`consent_token_expired and consent_token_mismatch mean this token changed nothing: start again with a first call and show the new summary. ` +
		`consent_token_invalid means this call changed nothing (the token is unknown, superseded, cancelled or already used by another request): call get_subscription to see the current plan before starting again. ` +
		`If the user declines, call cancel_confirmation with the confirmation_id. ` +
		`If the result has verification_required, the organisation wants proof that the user, not you, agreed: show the user the summary and the verify_url; ` +
		`they open it, sign in again and confirm there. Only then does the second call execute; before that it fails with insufficient_user_authentication, whose message repeats the verify_url. ` +
		`If the result has approval_required, other billing administrators must approve the change at approval_url (details.approvals_given of details.approvals_required; you cannot approve it): ` +
		`until then the second call fails with approval_pending; approval_rejected means someone rejected it or it was not approved in time, and nothing changed. ` +
		`If the organisation is already on that plan, the result says noop and no token is issued. ` +
		elicitationInstructions + appsInstructions
	elicitationInstructions = `If your client supports elicitation, billingd may instead ask the user itself during the first call. ` +
		`For a change that needs confirmation it shows the summary in a dialog: if the user accepts, the change is made in that same call ` +
		`and the result has "ok": true; otherwise it has "cancelled": true, nothing changed, and you must not retry unless the user asks again. ` +
		`For a change that needs approval or verification it may send the user to the approval or verification page; the result is then the usual proposal with approval_required or verification_required. ` +
		`The result's "elicitation" field says which dialog was shown and what the user did.`
)

// toolScopes is the one table of the scope each tool needs (contract §4). The
// HTTP scope gate and the tools themselves both read it. Every change tool
// needs billing:write.
var toolScopes = func() map[string]string {
	scopes := map[string]string{
		toolCancel:       auth.ScopeWrite,
		toolConfirm:      auth.ScopeWrite,
		toolSubscription: auth.ScopeRead,
		toolPlans:        auth.ScopeRead,
	}
	for _, op := range billing.Offers() {
		scopes[string(op.Name)] = auth.ScopeWrite
	}
	return scopes
}()

// changeArgs are the arguments of every change tool, as billing takes
// them. Each tool's input schema offers only the fields its operation
// takes (billing.Offered.Args, changeSchema), and the SDK refuses others.
type changeArgs struct {
	To           string `json:"to,omitempty" jsonschema:"Id of the plan to move to, as listed by list_plans (for example scale). The same value on both calls."`
	Quantity     int64  `json:"quantity,omitempty" jsonschema:"The number of seats the subscription should have (1 to 10000), on its current plan. The same value on both calls."`
	At           string `json:"at,omitempty" jsonschema:"When the change takes effect: now or period_end, as this tool's description says. The same value on both calls."`
	Reason       string `json:"reason,omitempty" jsonschema:"Why the customer cancels, if they said: customer_service, low_quality, missing_features, other, switched_service, too_complex, too_expensive or unused. The same value on both calls."`
	Comment      string `json:"comment,omitempty" jsonschema:"The customer's own words about the cancellation, if any (at most 500 characters). The same value on both calls."`
	ConfirmToken string `json:"confirm_token,omitempty" jsonschema:"Second call only: the confirm_token returned by the first call. Send it only after the user has read the summary and explicitly agreed. Omit it on the first call."`
}

// request is the handshake call the arguments make.
func (in changeArgs) request(op billing.Operation) billing.ChangeRequest {
	return billing.ChangeRequest{Operation: op, To: in.To, Quantity: in.Quantity, At: in.At, ConfirmToken: in.ConfirmToken,
		Reason: in.Reason, Comment: in.Comment}
}

// changeSchema is the input schema of op's tool: changeArgs' fields that
// op takes, and confirm_token.
func changeSchema(op billing.Offered) *jsonschema.Schema {
	all := mustSchema[changeArgs]()
	s := *all
	s.Properties, s.PropertyOrder = map[string]*jsonschema.Schema{}, nil
	for _, name := range append(slices.Clone(op.Args), "confirm_token") {
		s.Properties[name] = all.Properties[name]
	}
	s.Required = slices.Clone(op.Required)
	return &s
}

// cancelArgs are the arguments of cancel_confirmation.
type cancelArgs struct {
	ConfirmationID string `json:"confirmation_id" jsonschema:"The confirmation_id returned by the first call of upgrade_plan, downgrade_plan or change_seats."`
}

// noArgs is the argument object of the read tools: empty.
type noArgs struct{}

// planList is the body of list_plans, as GET /api/billing/plans.
type planList struct {
	Plans []billing.PlanView `json:"plans"`
}

func ptr[T any](v T) *T { return &v }

// registerTools adds the tools of contract §7 and §15 to s: one per gated
// operation, and the read tools (registerView adds confirm_plan_change).
func registerTools(s *sdk.Server, t tools) {
	for _, op := range billing.Offers() {
		addInteractiveTool(s, &sdk.Tool{
			Name: string(op.Name), Title: op.Title, Description: op.About + " " + twoCallInstructions,
			InputSchema: changeSchema(op), Annotations: planChangeAnnotations(op.Title), Meta: viewToolMeta(),
		}, t.log, changePlan(t, op.Name))
	}
	addTool(s, &sdk.Tool{
		Name:  toolSubscription,
		Title: "Current subscription",
		Description: "Read the organisation's current plan, its status and the end of the current billing period, and the standing mandates the user gave you " +
			"(mandates: what each lets you change without asking, and what is left of it). Changes nothing.",
		Annotations: readOnlyAnnotations("Current subscription"),
	}, t.log, t.subscription)
	addTool(s, &sdk.Tool{
		Name:        toolPlans,
		Title:       "Plan catalog",
		Description: "List the plans, cheapest first, with their prices (amount_cents is in the currency's minor unit as Stripe counts it; currency_exponent gives its digits: 5120 with 3 is 5.120) and billing interval. Changes nothing.",
		Annotations: readOnlyAnnotations("Plan catalog"),
	}, t.log, t.plans)
	addTool(s, &sdk.Tool{
		Name:  toolCancel,
		Title: "Cancel a pending plan change",
		Description: "Cancel a plan change the user declined: the confirmation's token can no longer be used, so the change cannot execute. " +
			"Takes the confirmation_id from the first call of upgrade_plan, downgrade_plan or change_seats. Cancelling an already cancelled confirmation succeeds again.",
		Annotations: &sdk.ToolAnnotations{Title: "Cancel a pending plan change",
			ReadOnlyHint: false, DestructiveHint: ptr(false), IdempotentHint: true, OpenWorldHint: ptr(false)},
	}, t.log, t.cancel)
}

// planChangeAnnotations: the second call changes a real subscription at the
// payment provider, and calling again is a new change, not a repeat.
func planChangeAnnotations(title string) *sdk.ToolAnnotations {
	return &sdk.ToolAnnotations{Title: title, ReadOnlyHint: false, DestructiveHint: ptr(true), IdempotentHint: false, OpenWorldHint: ptr(true)}
}

// readOnlyAnnotations: billingd's own records only.
func readOnlyAnnotations(title string) *sdk.ToolAnnotations {
	return &sdk.ToolAnnotations{Title: title, ReadOnlyHint: true, OpenWorldHint: ptr(false)}
}

// tools holds what the tool bodies need.
type tools struct {
	svc      *billing.Service
	log      *slog.Logger
	states   stateSealer
	observer HandshakeObserver // nil: not measured
	now      func() time.Time  // the request states' clock
}

// handshake is every handshake call the plan tools make (a tool call that
// elicits may make two), measured as the REST API measures its own.
func (t tools) handshake(ctx context.Context, caller billing.Caller, req billing.ChangeRequest) (billing.ChangeResult, error) {
	res, err := t.svc.ChangePlan(ctx, caller, req)
	if t.observer != nil {
		t.observer.ObserveHandshake(req.Operation, res, err)
	}
	return res, err
}

// changePlan is the tool of a gated operation: the REST handshake, except
// that a first call from a client that can show its user a dialog asks the
// user itself (elicit.go).
func changePlan(t tools, op billing.Operation) interactiveFunc[changeArgs, changeOutput] {
	return func(ctx context.Context, req *sdk.CallToolRequest, caller billing.Caller, in changeArgs) (reply[changeOutput], error) {
		client := declared(req)
		if isNextRound(req) {
			return t.nextRound(ctx, req, client, caller, op, in)
		}
		res, err := t.handshake(ctx, caller, in.request(op))
		if err != nil {
			return reply[changeOutput]{}, err
		}
		switch mode := howToAsk(res, client.caps); mode {
		case modeView:
			return forView(res), nil
		case "":
			return final(changeOutput{ChangeResult: res}, changeText(res)), nil
		default:
			return t.ask(ctx, req, client, caller, pending{
				Org: caller.Org, Principal: caller.Principal, Client: caller.Client, Protocol: client.protocol,
				Mode: mode, Proposal: res, NotAfter: res.ExpiresAt.Add(billing.MaxClockSkew),
			})
		}
	}
}

// changeText is the text block of a plan tool's result: on a first call the
// summary alone, so that a client showing text shows exactly what the user
// must agree to.
func changeText(res billing.ChangeResult) string {
	switch sub := res.Subscription; {
	case res.Proposed():
		return res.Summary
	case sub != nil && sub.Status == "canceled":
		return "Done: the subscription is cancelled; access has ended and it can no longer be changed."
	case res.Noop && sub != nil && sub.CancelAtPeriodEnd:
		return fmt.Sprintf("Nothing to do: the subscription is already cancelled at the end of the period (%s).",
			sub.CurrentPeriodEnd.Format("January 2, 2006"))
	case sub != nil && sub.CancelAtPeriodEnd:
		return fmt.Sprintf("Done: the subscription stays on the %s plan%s until %s, then ends (resume_subscription undoes this).",
			sub.Plan, seatsText(sub.Quantity), sub.CurrentPeriodEnd.Format("January 2, 2006"))
	case res.Noop && sub != nil && sub.ScheduledChange != nil:
		return fmt.Sprintf("Nothing to do: the change to the %s plan is already scheduled for %s.",
			sub.ScheduledChange.To, sub.ScheduledChange.At.Format("January 2, 2006"))
	case res.Noop && sub != nil:
		return fmt.Sprintf("Already on the %s plan%s: nothing changed and no confirmation is needed.", sub.Plan, seatsText(sub.Quantity))
	case sub != nil && sub.ScheduledChange != nil:
		return fmt.Sprintf("Scheduled: the subscription stays on the %s plan%s (status %s) until %s, then changes to the %s plan%s.",
			sub.Plan, seatsText(sub.Quantity), sub.Status, sub.ScheduledChange.At.Format("January 2, 2006"), sub.ScheduledChange.To,
			scheduledSeatsText(sub.ScheduledChange.Quantity))
	case sub != nil:
		return fmt.Sprintf("Done: the subscription is now on the %s plan%s (status %s).", sub.Plan, seatsText(sub.Quantity), sub.Status)
	default:
		return "Done."
	}
}

// seatsText names the seats after a plan: " with 5 seats"; nothing for
// none (a view that does not say) or one.
func seatsText(n int64) string {
	if n < 2 {
		return ""
	}
	return fmt.Sprintf(" with %d seats", n)
}

// scheduledSeatsText names the seats a scheduled change sets, if it sets
// any: " with 1 seat".
func scheduledSeatsText(n int64) string {
	if n == 1 {
		return " with 1 seat"
	}
	return seatsText(n)
}

// subscriptionResult is get_subscription's result: the subscription as
// REST shows it and, for the agent asking, the standing mandates its user
// gave it (contract §13), so that it knows before it asks what will
// execute at once.
type subscriptionResult struct {
	Org      string `json:"org,omitempty"`
	Plan     string `json:"plan"`
	Quantity int64  `json:"quantity"`
	Status   string `json:"status"`
	// CancelAtPeriodEnd: the subscription ends at the period's end
	// (resume_subscription undoes it); CanceledAt: when it was cancelled.
	CancelAtPeriodEnd bool                         `json:"cancel_at_period_end"`
	CanceledAt        *time.Time                   `json:"canceled_at,omitempty"`
	CurrentPeriodEnd  time.Time                    `json:"current_period_end"`
	ScheduledChange   *billing.ScheduledChangeView `json:"scheduled_change,omitempty"`
	// Mandates are the active standing mandates of this agent's client for
	// this user, with what is left of each.
	Mandates []billing.MandatesLeft `json:"mandates,omitempty"`
}

func (t tools) subscription(ctx context.Context, caller billing.Caller, _ noArgs) (subscriptionResult, string, error) {
	sub, err := t.svc.Subscription(ctx, caller)
	if err != nil {
		return subscriptionResult{}, "", err
	}
	mandates, err := t.svc.ActiveMandates(ctx, caller)
	if err != nil {
		return subscriptionResult{}, "", err
	}
	out := subscriptionResult{Org: sub.Org, Plan: sub.Plan, Quantity: sub.Quantity, Status: sub.Status, CurrentPeriodEnd: sub.CurrentPeriodEnd,
		CancelAtPeriodEnd: sub.CancelAtPeriodEnd, CanceledAt: sub.CanceledAt,
		ScheduledChange: sub.ScheduledChange, Mandates: mandates}
	text := fmt.Sprintf("Organisation %s is on the %s plan%s (status %s); the current period ends %s.",
		sub.Org, sub.Plan, seatsText(sub.Quantity), sub.Status, sub.CurrentPeriodEnd.Format("January 2, 2006"))
	if sc := sub.ScheduledChange; sc != nil {
		text += fmt.Sprintf(" A change to the %s plan%s is scheduled for %s.", sc.To, scheduledSeatsText(sc.Quantity), sc.At.Format("January 2, 2006"))
	}
	switch {
	case sub.Status == "canceled":
		text += " It was cancelled: it can no longer be changed."
	case sub.CancelAtPeriodEnd:
		text += fmt.Sprintf(" It is cancelled at the end of the period: it ends on %s unless resumed (resume_subscription).",
			sub.CurrentPeriodEnd.Format("January 2, 2006"))
	}
	for _, m := range mandates {
		text += " " + m.Words()
	}
	return out, text, nil
}

func (t tools) plans(_ context.Context, _ billing.Caller, _ noArgs) (planList, string, error) {
	plans := t.svc.Plans()
	names := make([]string, 0, len(plans))
	for _, p := range plans {
		names = append(names, fmt.Sprintf("%s (%s)", p.ID, p.Name))
	}
	return planList{Plans: plans}, "Plans, cheapest first: " + strings.Join(names, ", ") + ".", nil
}

func (t tools) cancel(ctx context.Context, caller billing.Caller, in cancelArgs) (billing.CancelResult, string, error) {
	res, err := t.svc.Cancel(ctx, caller, in.ConfirmationID)
	if err != nil {
		return billing.CancelResult{}, "", err
	}
	return res, fmt.Sprintf("Confirmation %s is cancelled: its token can no longer be used.", res.ID), nil
}
