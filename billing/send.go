package billing

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// The Stripe request and the record steps of the money path (confirm.go's
// steps 4 and 5): the request under the attempt's idempotency key, and the
// record of what came back: executed with its receipt, failed, or unknown
// and left to settle (settle.go).

// send is the provider request for c under its current attempt's key, and
// the record of its outcome. auditUnknown: an unknown outcome is audited
// (once per confirmation, when it first becomes unknown).
func (s *Service) send(ctx context.Context, tx Tx, caller Caller, c Confirmation, acct Account, now time.Time,
	attached *ProviderSchedule, auditUnknown bool) (redemption, error) {
	applied, err := s.apply(ctx, c, acct, attached)
	s.at(ctx, StepRecord, &c)
	return s.recordAttempt(ctx, tx, caller, c, acct, now, applied, err, auditUnknown)
}

// afterSideEffect is the context for the steps from the recovery point on:
// detached from the client, so a client that hangs up changes nothing about
// what is sent and recorded, and bounded, so a row lock is never held
// forever. It allows for two requests and a read-back (settling) plus the
// writes.
func (s *Service) afterSideEffect(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 3*s.execTimeout+recordTimeout)
}

// recordTimeout bounds the writes that record a provider outcome.
const recordTimeout = 10 * time.Second

// apply sends c's change to the provider under the idempotency key of c's
// current attempt, releasing the attached schedule first.
func (s *Service) apply(ctx context.Context, c Confirmation, acct Account, attached *ProviderSchedule) (AppliedChange, error) {
	change := planChangeFor(acct, c.Terms)
	change.ConfirmationID, change.Attached = c.ID, attached
	callCtx, cancel := context.WithTimeout(ctx, s.execTimeout)
	defer cancel()
	return s.payments.ApplyPlanChange(callCtx, change, idempotencyKey(c))
}

// recordAttempt records the outcome of a provider request for c; now is
// the transaction's database time.
func (s *Service) recordAttempt(ctx context.Context, tx Tx, caller Caller, c Confirmation, acct Account, now time.Time,
	applied AppliedChange, err error, auditUnknown bool) (redemption, error) {
	switch {
	case err == nil && keepsPlan(c.Terms) && applied.PriceID != "" &&
		(applied.PriceID != c.Terms.FromPriceID || applied.Quantity > 0 && applied.Quantity != c.Terms.seatsFrom()):
		// The subscription is not on the plan and seats kept: the renewal
		// made the scheduled change before the release (renewed_first),
		// or they were changed elsewhere. Nothing was kept.
		state, rerr := s.readBack(ctx, acct)
		if rerr != nil {
			return redemption{}, rerr
		}
		return s.recordNotMade(ctx, tx, caller, c, acct, now, state)
	case err == nil:
		return s.recordExecuted(ctx, tx, caller, c, acct.Subscription, now, applied)
	case errors.Is(err, ErrRateLimited) && auditUnknown:
		// The second call's first request: Stripe refused it before
		// executing it and kept nothing under its key: nothing was made.
		// The confirmation goes back to pending, as before the second
		// call: its token stays redeemable, and nothing is sent unless the
		// caller asks again. (A resend or a probe rate-limited says
		// nothing of an earlier request under the key: unknown, below.)
		limited := s.event(caller, c.Operation, EventOperationFailed, c.ID, "rate_limited")
		limited.Outcome = "retryable"
		if err := tx.Record(ctx, Record{ConfirmationID: c.ID, Status: StatusPending, Events: []AuditEvent{limited}}); err != nil {
			return redemption{}, err
		}
		outcome, err := s.afterRefusal(ctx, tx, c, acct, now, errProviderRateLimited(err))
		return redemption{outcome: outcome}, err
	case !errors.Is(err, ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, ErrRateLimited):
		failure := providerError("apply plan change", err)
		reason := string(ErrorCode(failure))
		failed := s.event(caller, c.Operation, EventOperationFailed, c.ID, reason)
		if err := tx.Record(ctx, Record{ConfirmationID: c.ID, Status: StatusFailed,
			Failure: reason, Attempt: &c.Attempt, Events: []AuditEvent{failed}}); err != nil {
			return redemption{}, err
		}
		outcome, err := s.afterRefusal(ctx, tx, c, acct, now, failure)
		return redemption{outcome: outcome}, err
	default:
		s.log.WarnContext(ctx, "plan change outcome unknown; settling", "confirmation_id", c.ID, "attempt", c.Attempt, "err", err)
		var events []AuditEvent
		if auditUnknown {
			unknown := s.event(caller, c.Operation, EventOperationFailed, c.ID, reasonOutcomeUnknown)
			unknown.Outcome = "unknown"
			events = append(events, unknown)
		}
		return redemption{outcome: errOutcomeUnknown(err)}, tx.Record(ctx, Record{ConfirmationID: c.ID,
			Status: StatusExecuting, Attempt: &c.Attempt, Events: events})
	}
}

// recordExecuted records c as executed: the new subscription, the answer to
// replay, OPERATION_EXECUTED and the signed receipt, which the answer (and so
// every replay) carries. The amount charged is the one the provider
// invoiced, with the quote beside it when they differ. now, the
// transaction's database time, is the receipt's executed_at (and the
// confirmation's finished_at).
func (s *Service) recordExecuted(ctx context.Context, tx Tx, caller Caller, c Confirmation, sub Subscription,
	now time.Time, applied AppliedChange) (redemption, error) {
	sub = subscriptionAfter(c, sub, applied)
	if p, ok := s.catalog.planByPrice(applied.PriceID); ok {
		// Stripe's price, where it said: a cancellation sets none, and the
		// price may have moved since the check (Stripe's dashboard).
		sub.Plan = p.ID
	}
	sub.SyncedAt = now
	result := ChangeResult{OK: true, Subscription: viewOf(sub), Charged: chargedFor(c, applied)}
	if k := c.Consent; k != nil && k.Method == ConsentMandate {
		result.MandateID = k.MandateID
	}
	if result.Notice = chargedNotice(result.Charged); result.Notice != "" {
		s.log.WarnContext(ctx, "invoiced amount differs from the quote or is unknown", "confirmation_id", c.ID,
			"quoted", result.Charged.QuotedAmountDueNowCents, "invoice_id", result.Charged.InvoiceID)
	}
	// The change was made: a receipt that cannot be signed must not stop it
	// being recorded.
	rcpt, err := s.receiptFor(c, sub, now, result.Charged)
	if err != nil {
		s.log.ErrorContext(ctx, "executed change recorded without a receipt", "confirmation_id", c.ID, "err", err)
	}
	if rcpt != nil {
		result.Receipt = rcpt.Receipt
	}
	executed := s.event(caller, c.Operation, EventOperationExecuted, c.ID, "")
	executed.Consent = consentOf(c)
	err = tx.Record(ctx, Record{ConfirmationID: c.ID, Status: StatusExecuted, Subscription: &sub,
		Attempt: &c.Attempt, Result: &result, Receipt: rcpt, Events: []AuditEvent{executed}})
	return redemption{result: result}, err
}

// idempotencyKey is derived from the confirmation and its attempt, so every
// retry of one attempt, including one after a crash, is the same request to
// Stripe, and a new attempt (made only once the provider showed that the
// previous one changed nothing) is a new request.
func idempotencyKey(c Confirmation) string {
	if c.Attempt == 0 {
		return "billingd-" + c.ID
	}
	return fmt.Sprintf("billingd-%s-%d", c.ID, c.Attempt)
}
