package billing

import "time"

// Operation names a gated operation; the values are the MCP tool names.
// Each is one value (operation.go) in a file of its own.
type Operation string

// Caller is the authenticated identity behind a request.
type Caller struct {
	Org       string // org id from the access token's org claim
	Principal string // the token's sub
	Client    string // azp or client_id: the agent or app acting, if any
	Admin     bool   // holds billing:admin
	// Agent: the call came over MCP, an agent's channel, or with a token
	// that names an actor (RFC 8693 act: someone acting on the person's
	// behalf): an agent's whatever its client. A call without it is not
	// thereby a person's (person.go).
	Agent bool
	// Session: the call came from billingd's own signed-in pages (the
	// session cookie, CSRF-checked), not with a bearer token: a person's
	// own call unless the org names the pages' client an agent (person.go).
	Session   bool
	RequestID string // for the audit log
	// AuthTime is when the person last authenticated at the identity
	// provider, by the access token's auth_time (zero: unknown). The verify
	// level executes a second call only after an authentication newer than
	// the confirmation (RFC 9470 step-up).
	AuthTime time.Time
	// ACR is that authentication's context class (acr), "" when unknown.
	ACR string
	// Consent is how the transport the call came through lets the person
	// agree (consent.go): a claim that billing caps at what the channel and
	// the confirmation can show. Empty: the weakest, agent_relayed.
	Consent ConsentMethod
	// viaAllow: the org's policy executed the change without asking
	// anyone (set by billing only).
	viaAllow bool
	// mandate: the id of the standing mandate a covered first call executes
	// under (mandate.go; set by billing only).
	mandate string
}

// Org is a customer organisation with its Stripe customer.
type Org struct {
	ID               string
	Name             string
	StripeCustomerID string
}

// Subscription is billingd's copy of the org's Stripe subscription. Version
// increases with every change, so a confirmation can tell that the
// subscription it described has changed since.
type Subscription struct {
	Org                  string
	StripeSubscriptionID string
	StripeItemID         string
	Plan                 string
	// Quantity is the first item's quantity: the seats (1 at least).
	Quantity         int64
	Status           string
	CurrentPeriodEnd time.Time
	// CancelAtPeriodEnd: the subscription ends at CurrentPeriodEnd instead
	// of renewing (a pending cancellation, which resume_subscription
	// undoes). CanceledAt is when it was cancelled at Stripe (zero: never).
	CancelAtPeriodEnd bool
	CanceledAt        time.Time
	Version           int64
	// SyncedAt is when the provider created the last event applied to this
	// copy; older events are ignored.
	SyncedAt time.Time
	// Scheduled is the plan change the provider will make at a later date
	// (a downgrade at the period's end), nil if none.
	Scheduled *ScheduledChange
}

// ScheduledChange is a plan change the provider makes at a later date, by a
// subscription schedule (schedule.go).
type ScheduledChange struct {
	ToPlan string    `json:"to"` // the plan id; the provider's price id if outside the catalog
	At     time.Time `json:"at"`
	// ConfirmationID is the confirmation that scheduled it; "" when it was
	// not scheduled through billingd (Stripe's dashboard).
	ConfirmationID string `json:"confirmation_id,omitempty"`
	ScheduleID     string `json:"schedule_id,omitempty"`
	PriceID        string `json:"price_id,omitempty"`
	// Quantity is the seats from At (fewer seats at the period's end); 0
	// in a change recorded before seats could be scheduled: the
	// subscription's.
	Quantity int64 `json:"quantity,omitempty"`
}

// Account is an org with its subscription, as the handshake reads them.
type Account struct {
	Org          Org
	Subscription Subscription
	Policy       Policy
	// Unsettled: a change of this subscription was sent to the provider and
	// its outcome is not known yet. No other change may be proposed or
	// executed until it is settled: a later change would make it impossible
	// to tell from the provider whether the first one was applied.
	Unsettled bool
	// Mandated: the principal the account was read for (Store.
	// AccountForCall) holds a standing mandate in force, so a first call
	// looks for one that covers its change (mandate.go); without one it
	// spends no round trip looking.
	Mandated bool
}

// Status is the lifecycle state of a confirmation.
type Status string

// Confirmation states. Only pending confirmations can be redeemed.
const (
	StatusPending Status = "pending"
	// StatusExecuting: the provider was asked to make the change and its
	// answer is unknown (timeout, 5xx, lost response). The confirmation is
	// settled by the owner's retry, the background reconciler or a webhook.
	StatusExecuting   Status = "executing"
	StatusExecuted    Status = "executed"
	StatusFailed      Status = "failed"
	StatusSuperseded  Status = "superseded"
	StatusCancelled   Status = "cancelled"
	StatusInvalidated Status = "invalidated" // a mismatching second call voided it
	StatusExpired     Status = "expired"
	StatusRevoked     Status = "revoked"  // the subscription changed outside billingd (drift)
	StatusRejected    Status = "rejected" // an approver said no
)

// Approval is the state of a confirmation's out-of-band approval.
type Approval string

// Approval states; "" when the policy asked for none.
const (
	ApprovalPending  Approval = "pending"
	ApprovalGranted  Approval = "granted"
	ApprovalRejected Approval = "rejected"
)

// Terms are the facts a confirmation is bound to: everything the summary
// states. The second call executes exactly these terms or nothing.
type Terms struct {
	FromPlan        string
	ToPlan          string
	FromPriceID     string
	ToPriceID       string
	FromAmountCents int64
	ToAmountCents   int64
	// Quantity is the seats the summary states: the subscription's when
	// quoted, kept by a plan change (0 in a confirmation stored before
	// seats were counted: one).
	Quantity int64
	// ToQuantity is the seats after the change (change_seats); 0: the
	// same as Quantity (a plan change keeps them). Terms.seatsTo reads it.
	ToQuantity      int64
	Currency        string
	ProrationDate   time.Time // quoted in the summary and sent to Stripe on execution
	SubscriptionVer int64     // the subscription version the preview was made against
	AmountDueCents  int64     // charged now (upgrade), after every part below
	CreditCents     int64     // credited on the next invoice (downgrade)
	// The parts of AmountDueCents, as the provider's preview gives them
	// (amounts.go): AmountDueCents = Subtotal − Discount + Tax −
	// CreditApplied. The summary states each part that is not zero.
	SubtotalCents      int64
	DiscountCents      int64
	TaxCents           int64
	CreditAppliedCents int64
	NextChargeAt       time.Time
	// Livemode: the change moves real money (a live Stripe key). A token
	// issued in one mode never executes in the other.
	Livemode bool
	// AtPeriodEnd: the change is scheduled for the end of the current
	// period (NextChargeAt); nothing is charged or credited now, and
	// AtRenewal is what the renewal at the new price will charge.
	AtPeriodEnd bool
	AtRenewal   *Amounts
	// Cancels is the scheduled change this change cancels (the summary
	// says so); a change with FromPlan = ToPlan does only that (keep).
	Cancels *ScheduledChange
	// FromStatus is the subscription's status when quoted.
	FromStatus string
	// Cancellation is what the change does to the subscription's end
	// (cancel_subscription, resume_subscription); "" for a change that
	// leaves it. CancelReason and CancelComment are the customer's
	// feedback, sent to Stripe as its cancellation_details.
	Cancellation  Cancellation
	CancelReason  string
	CancelComment string
	// FromCancelAtPeriodEnd: a cancellation at the period's end was
	// pending when quoted.
	FromCancelAtPeriodEnd bool
}

// Cancellation is what a change does to the subscription's end.
type Cancellation string

// The changes of a subscription's end (contract §15).
const (
	// CancelNow ends the subscription now: access ends, the unused time
	// is credited to the customer's balance, and it cannot be undone.
	CancelNow Cancellation = "now"
	// CancelAtPeriodEnd ends it at the end of the current period instead
	// of renewing; nothing is charged or credited, and it can be resumed
	// until then.
	CancelAtPeriodEnd Cancellation = "period_end"
	// Resume undoes a pending cancellation at the period's end.
	Resume Cancellation = "resume"
)

// Confirmation is a stored first call.
type Confirmation struct {
	ID        string
	TokenHash []byte
	Org       string
	Principal string
	Client    string
	Operation Operation
	Terms     Terms
	Summary   string
	Status    Status
	Approval  Approval
	// Approver is the person who decided last (approved or rejected).
	Approver string
	// ApprovalsRequired is how many distinct people must approve (the
	// approve level; 1 by default): the strictest matching rule's N when
	// issued, raised at execution if the policy then asks for more.
	ApprovalsRequired int
	// Approvers are the people who approved so far, in order, each once.
	Approvers []string
	// ApproverAuth is how the approver had authenticated at the identity
	// provider when deciding.
	ApproverAuth Authentication
	// VerifyRequired: the org's policy asked for the verify level.
	VerifyRequired bool
	// Verification is set once the requester proved a fresh sign-in.
	Verification *Verification
	// Consent is how the person agreed (consent.go), recorded with the
	// attempt that sends the change; nil before.
	Consent   *Consent
	CreatedAt time.Time
	ExpiresAt time.Time
	// Agent: issued to an agent (people.isAgent at the first call). The
	// confirmation stays an agent's whichever channel redeems it.
	Agent bool
	// Attempt numbers the provider requests made for this confirmation; each
	// has its own idempotency key (see idempotencyKey).
	Attempt int
	// SentAt is when the change was first about to be sent to the provider
	// (the second call's recovery point); zero until then. A resend under a
	// new key must come within the token's lifetime of it.
	SentAt time.Time
	// AttemptedAt is when the last attempt was made or recorded.
	AttemptedAt time.Time
	// Failure is why a failed confirmation's change was not made (the
	// audit reason: payment_failed, not_applied, …).
	Failure string
	// Restore is the scheduled change this confirmation's first step
	// released and owes back, the change itself not made (restore.go).
	Restore RestoreDebt
	// Result is the second call's answer once executed, replayed to the
	// owner who repeats the call.
	Result *ChangeResult
}

// Authentication is what the identity provider said about a person's last
// sign-in: when (auth_time) and how (acr).
type Authentication struct {
	AuthTime time.Time
	ACR      string
}

// Verification is the recorded proof that the requester authenticated at
// the identity provider after the confirmation was issued.
type Verification struct {
	VerifiedAt time.Time // the database's now when it was recorded
	Method     string    // VerifiedByPage or VerifiedByStepUp
	Authentication
}

// How a verification was made.
const (
	VerifiedByPage   = "page"    // fresh OIDC sign-in at verify_url, then Confirm
	VerifiedByStepUp = "step_up" // the second call's access token (RFC 9470)
)

// Details is the machine-readable part of a proposal (the "details" object).
type Details struct {
	// Danger is what kind of change this is: reversible, charges or
	// irreversible (contract §15).
	Danger Danger `json:"danger"`
	From   string `json:"from"`
	To     string `json:"to"`
	// QuantityFrom and QuantityTo are the seats before and after: a plan
	// change keeps them, and every amount here counts them all.
	QuantityFrom      int64 `json:"quantity_from"`
	QuantityTo        int64 `json:"quantity_to"`
	AmountDueNowCents int64 `json:"amount_due_now_cents"`
	// The parts of amount_due_now_cents (contract §6): subtotal, less
	// discount, plus tax, less the customer's credit applied.
	SubtotalCents      int64  `json:"subtotal_cents"`
	DiscountCents      int64  `json:"discount_cents"`
	TaxCents           int64  `json:"tax_cents"`
	CreditAppliedCents int64  `json:"credit_applied_cents"`
	CreditCents        int64  `json:"credit_cents,omitempty"`
	Currency           string `json:"currency"`
	// CurrencyDigits say how every amount here (next_charge's too) is
	// counted and written: currency_exponent is always present.
	CurrencyDigits
	EffectiveAt  time.Time `json:"effective_at"`
	NextChargeAt time.Time `json:"next_charge_at"`
	// Livemode is false when the change is made with a test-mode key: no
	// real money moves.
	Livemode bool `json:"livemode"`
	// At is "period_end" for a change scheduled for the end of the current
	// period (EffectiveAt), whose renewal invoice will charge NextCharge.
	At         string   `json:"at,omitempty"`
	NextCharge *Amounts `json:"next_charge,omitempty"`
	// CancelsScheduledChange is the scheduled change this one cancels.
	CancelsScheduledChange *ScheduledChangeView `json:"cancels_scheduled_change,omitempty"`
	// Cancellation is what the change does to the subscription's end:
	// "now", "period_end" (cancel_subscription) or "resume"; CancelAt is
	// when access ends (now, or the period's end), and CancelReason and
	// CancelComment the customer's feedback, repeated by the second call.
	Cancellation  Cancellation `json:"cancellation,omitempty"`
	CancelAt      *time.Time   `json:"cancel_at,omitempty"`
	CancelReason  string       `json:"cancel_reason,omitempty"`
	CancelComment string       `json:"cancel_comment,omitempty"`
	// ApprovalProgress, for a change that waits for approvers: how many
	// have approved and how many are needed.
	ApprovalProgress
}

// Event names of the audit log (contract §8).
const (
	EventTokenIssued       = "TOKEN_ISSUED"
	EventTokenValidated    = "TOKEN_VALIDATED"
	EventTokenRejected     = "TOKEN_REJECTED"
	EventTokenRevoked      = "TOKEN_REVOKED"
	EventOperationExecuted = "OPERATION_EXECUTED"
	EventOperationFailed   = "OPERATION_FAILED"
	EventOperationDenied   = "OPERATION_DENIED"
	EventApprovalGranted   = "APPROVAL_GRANTED"
	EventApprovalRejected  = "APPROVAL_REJECTED"
	// EventApprovalExpired: a change's approvals were not complete when its
	// window ended, and it was rejected (reason expired): fail closed.
	EventApprovalExpired = "APPROVAL_EXPIRED"
	EventPolicyUpdated   = "POLICY_UPDATED"
	EventUserVerified    = "USER_VERIFIED"
	// EventScheduledChangeApplied: the provider made a scheduled change
	// (at the renewal), as billingd learnt from it.
	EventScheduledChangeApplied = "SCHEDULED_CHANGE_APPLIED"
)

// AuditEvent is one row of the audit log.
type AuditEvent struct {
	ID             int64     `json:"id"`
	At             time.Time `json:"at"`
	Event          string    `json:"event"`
	Org            string    `json:"org"`
	Principal      string    `json:"principal"`
	Client         string    `json:"client"`
	Operation      string    `json:"operation"`
	ConfirmationID string    `json:"confirmation_id"`
	Outcome        string    `json:"outcome"`
	Reason         string    `json:"reason"`
	RequestID      string    `json:"request_id"`
	// Consent is how the person agreed, on OPERATION_EXECUTED events
	// (contract §11); part of the event's chain hash.
	Consent *Consent `json:"consent,omitempty"`
}

// event starts an audit event for the caller.
func (s *Service) event(caller Caller, op Operation, name, confirmationID, reason string) AuditEvent {
	outcome := "ok"
	switch name {
	case EventTokenRejected, EventOperationDenied, EventApprovalRejected, EventApprovalExpired:
		outcome = "rejected"
	case EventOperationFailed:
		outcome = "failed"
	case EventTokenRevoked:
		outcome = "revoked"
	}
	return AuditEvent{
		Event: name, Org: caller.Org, Principal: caller.Principal, Client: caller.Client,
		Operation: string(op), ConfirmationID: confirmationID, Outcome: outcome, Reason: reason,
		RequestID: caller.RequestID,
	}
}
