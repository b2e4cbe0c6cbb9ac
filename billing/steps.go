package billing

import "context"

// The money path, as named steps.
//
// Every path that may move money or record that it moved is a list of named
// steps, declared here in the order they run. The code marks each step
// where it begins (s.at(ctx, StepX, …)), so a reader finds the step list
// here and each step in the code by its name. A step is also a failpoint: a
// test arms a StepHook that runs when a step begins — and there kills the
// process, cuts the database, makes Stripe fail or lets another caller in —
// and the failpoint sweep (integration/sweep_test.go) runs every step of
// every path under every fault, judged by one oracle. In production the
// hook is nil and a step costs one nil check (BenchmarkStepDisarmed).
//
// A step added to the code must be added to its path's list: the sweep
// refuses a step it was not told of, and fails for a listed step that no
// case reached.

// Step is one named step of the money path.
type Step struct {
	Path string // the path it belongs to: first_call, second_call, …
	Name string
}

func (s Step) String() string { return s.Path + "/" + s.Name }

// The first call (propose.go): it quotes (quote.go) and issues (issue.go); nothing is sent.
var (
	// StepQuote: the subscription read, the provider is asked for a preview.
	StepQuote = Step{"first_call", "quote"}
	// StepIssue: the priced confirmation is about to be stored.
	StepIssue = Step{"first_call", "issue"}
)

// The second call (confirm.go).
var (
	// StepConsume: the subscription and the confirmation are locked; every
	// rule and the policy are about to be checked.
	StepConsume = Step{"second_call", "consume"}
	// StepCheckAtProvider: the subscription is read at the provider, to see
	// that it is still the one the quote assumed.
	StepCheckAtProvider = Step{"second_call", "check_at_provider"}
	// StepRecoveryPoint: the confirmation is about to be committed as
	// executing (the last instant at which nothing can have been sent).
	StepRecoveryPoint = Step{"second_call", "recovery_point"}
	// StepSend: the recovery point is committed and the locks taken again;
	// the provider request is about to leave.
	StepSend = Step{"second_call", "send"}
	// StepRecord: the provider answered (or did not); its outcome is about
	// to be recorded.
	StepRecord = Step{"second_call", "record"}
	// StepCommit: everything is recorded; the transaction is about to
	// commit.
	StepCommit = Step{"second_call", "commit"}
)

// Settling an unknown outcome (settle.go), by the owner's retry or any
// replica's settler.
var (
	// StepSettleLock: the settler locked an executing confirmation.
	StepSettleLock = Step{"settle", "lock"}
	// StepSettleReadBack: the subscription is read back at the provider.
	StepSettleReadBack = Step{"settle", "read_back"}
	// StepSettleResend: the same request is sent again under the same key.
	StepSettleResend = Step{"settle", "resend"}
	// StepSettleCommit: the settler's outcome is about to commit.
	StepSettleCommit = Step{"settle", "commit"}
)

// Provider events (reconcile.go).
var (
	// StepWebhookRead: the event's subscription is locked; it is about to
	// be read at the provider.
	StepWebhookRead = Step{"webhook", "read"}
	// StepWebhookCommit: what the provider shows is about to commit.
	StepWebhookCommit = Step{"webhook", "commit"}
)

// Scheduled changes (schedule.go; the provider's requests in
// internal/stripepay).
var (
	// StepRelease: the schedule a change cancels is about to be released.
	StepRelease = Step{"period_end", "release"}
	// StepScheduleCreate: a schedule is about to be made from the
	// subscription.
	StepScheduleCreate = Step{"period_end", "schedule_create"}
	// StepPhases: the schedule's phases are about to be set.
	StepPhases = Step{"period_end", "phases"}
	// StepKeep: a keep's release is made; the subscription is about to be
	// read back to see the plan kept.
	StepKeep = Step{"period_end", "keep"}
	// StepRestore: a change not made released a scheduled change, which is
	// about to be scheduled again: at once, or by the settler's retry of a
	// restore owed (restore.go).
	StepRestore = Step{"period_end", "restore"}
	// StepRenewal: the settler reads back a subscription whose scheduled
	// change is due.
	StepRenewal = Step{"period_end", "renewal"}
)

// Paths lists every path of the money path with its steps, in the order
// they run: what the failpoint sweep iterates.
func Paths() [][]Step {
	return [][]Step{
		{StepQuote, StepIssue},
		{StepConsume, StepCheckAtProvider, StepRecoveryPoint, StepSend, StepRecord, StepCommit},
		{StepSettleLock, StepSettleReadBack, StepSettleResend, StepSettleCommit},
		{StepWebhookRead, StepWebhookCommit},
		{StepRelease, StepScheduleCreate, StepPhases, StepKeep, StepRestore, StepRenewal},
	}
}

// StepEvent is a step beginning, with what it is about.
type StepEvent struct {
	Step Step
	// Org, Confirmation and Subscription (the provider's id) name what the
	// step is about, where known; a test arms a fault for one of them.
	Org, Confirmation, Subscription string
}

// StepHook runs when a step begins; nil (production) does nothing. It may
// block, or never return (a test that kills the process there). It cannot
// fail the step: the faults it brings about are real ones.
type StepHook func(ctx context.Context, at StepEvent)

// StepHooks runs each of hooks in turn at every step (tracing's, then the
// failpoints'); nil ones are left out, and when none is left it is nil, so
// a step still costs one nil check.
func StepHooks(hooks ...StepHook) StepHook {
	var armed []StepHook
	for _, h := range hooks {
		if h != nil {
			armed = append(armed, h)
		}
	}
	switch len(armed) {
	case 0:
		return nil
	case 1:
		return armed[0]
	}
	return func(ctx context.Context, at StepEvent) {
		for _, h := range armed {
			h(ctx, at)
		}
	}
}

// At runs the hook, if any, for step.
func (h StepHook) At(ctx context.Context, step Step, at StepEvent) {
	if h == nil {
		return
	}
	at.Step = step
	h(ctx, at)
}

// at marks the beginning of step for c.
func (s *Service) at(ctx context.Context, step Step, c *Confirmation) {
	if s.steps == nil {
		return
	}
	s.steps.At(ctx, step, StepEvent{Org: c.Org, Confirmation: c.ID})
}

// atAccount marks the beginning of step for acct's subscription.
func (s *Service) atAccount(ctx context.Context, step Step, acct *Account) {
	if s.steps == nil {
		return
	}
	s.steps.At(ctx, step, StepEvent{Org: acct.Org.ID, Subscription: acct.Subscription.StripeSubscriptionID})
}
