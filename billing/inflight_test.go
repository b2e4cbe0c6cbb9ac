package billing_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/billing/billingtest"
)

// Issue 27's review findings 1, 3, 4 and 6; each test failed before its fix.

// commitFails is a store whose next transaction fails at its COMMIT, after
// its function succeeded: a restart, a failover or a terminated backend
// between the provider's answer and the commit. Work committed earlier in
// the transaction (a recovery point) stays.
type commitFails struct {
	*billingtest.Store
	fail bool
}

func (s *commitFails) InTx(ctx context.Context, fn func(billing.Tx) error) error {
	return s.Store.InTx(ctx, func(tx billing.Tx) error {
		if err := fn(tx); err != nil {
			return err
		}
		if s.fail {
			s.fail = false
			return fmt.Errorf("commit: terminating connection secret-detail-7: %w", billing.ErrUnavailable)
		}
		return nil
	})
}

// TestCommitFailureAfterTheRecoveryPointIsOutcomeUnknown: the change was
// made at the provider and the COMMIT that records it failed. The answer is
// that the outcome is not yet known (the settler records it), never
// "nothing was changed".
func TestCommitFailureAfterTheRecoveryPointIsOutcomeUnknown(t *testing.T) {
	f := newHandshakeFixture(t)
	store := &commitFails{Store: f.store}
	svc, err := billing.NewService(billing.Config{Store: store, Payments: f.provider,
		Catalog: testCatalog(t, billing.DefaultPlans()), TokenTTL: time.Minute, Livemode: true})
	if err != nil {
		t.Fatal(err)
	}
	f.svc = svc
	p := f.propose(t, alice, billing.OpUpgrade, "scale")
	store.fail = true
	_, err = f.confirm(alice, billing.OpUpgrade, "scale", p.ConfirmToken)
	wantCode(t, err, billing.CodeUpstreamUnavailable)
	wantPublicMessageClean(t, err, "secret-detail-7")
	if msg := billing.PublicMessage(err); strings.Contains(msg, "nothing was changed") ||
		!strings.Contains(msg, "finding out whether it was made") {
		t.Errorf("answer %q after the change was sent, want outcome unknown", msg)
	}
	if f.provider.Changes() != 1 {
		t.Fatalf("%d changes at the provider", f.provider.Changes())
	}
	if c := f.confirmation(t, p.ConfirmationID); c.Status != billing.StatusExecuting {
		t.Errorf("status %s, want executing (the settler records it)", c.Status)
	}
	f.store.Advance(time.Second)
	// A limit of one: the row that fails does not use up the round.
	if _, err := f.svc.SettleUnknownOutcomes(context.Background(), time.Millisecond, 1); err != nil {
		t.Fatal(err)
	}
	if c := f.confirmation(t, p.ConfirmationID); c.Status != billing.StatusExecuted || f.provider.Changes() != 1 {
		t.Errorf("settled as %s with %d changes, want executed with one", c.Status, f.provider.Changes())
	}
}

// providers is a provider with one billingtest.Provider per subscription.
type providers map[string]*billingtest.Provider

func (p providers) PreviewPlanChange(ctx context.Context, change billing.PlanChange) (billing.Preview, error) {
	return p[change.SubscriptionID].PreviewPlanChange(ctx, change)
}

func (p providers) ApplyPlanChange(ctx context.Context, change billing.PlanChange, key string) (billing.AppliedChange, error) {
	return p[change.SubscriptionID].ApplyPlanChange(ctx, change, key)
}

func (p providers) ReadSubscription(ctx context.Context, id string) (billing.ProviderSubscription, error) {
	return p[id].ReadSubscription(ctx, id)
}

func (p providers) SubscriptionInvoices(ctx context.Context, id string, since time.Time) ([]billing.Invoice, error) {
	return p[id].SubscriptionInvoices(ctx, id, since)
}

func (p providers) CreateCustomer(ctx context.Context, c billing.NewCustomer, key string) (billing.CreatedCustomer, error) {
	return billing.CreatedCustomer{}, fmt.Errorf("not implemented")
}

// TestSettlerGoesOnPastAConfirmationItCannotSettle: two orgs' upgrades
// whose answers were lost; recording the oldest fails on every try. The
// settler settles the other in the same round, and the oldest stays
// executing for the next.
func TestSettlerGoesOnPastAConfirmationItCannotSettle(t *testing.T) {
	f := newHandshakeFixture(t)
	other := testAccount()
	other.Org.ID, other.Org.StripeCustomerID, other.Subscription.Org = "org_two", "cus_2", "org_two"
	other.Subscription.StripeSubscriptionID, other.Subscription.StripeItemID = "sub_2", "si_2"
	f.store.Update(func(st *billingtest.State) { st.Accounts["org_two"] = other })
	second := &billingtest.Provider{Preview: f.provider.Preview, PeriodEnd: periodEnd, ReadState: billingtest.StateOf(other)}
	f.svc = f.serviceWith(t, providers{"sub_1": f.provider, "sub_2": second})
	bob := billing.Caller{Org: "org_two", Principal: "bob", Client: "agent-2", RequestID: "req-2"}

	lost := fmt.Errorf("timeout: %w", billing.ErrUnavailable)
	stuck := f.propose(t, alice, billing.OpUpgrade, "scale")
	f.provider.ApplyErrs = []error{lost}
	_, err := f.confirm(alice, billing.OpUpgrade, "scale", stuck.ConfirmToken)
	wantCode(t, err, billing.CodeUpstreamUnavailable)
	f.store.Advance(time.Second)
	later := f.propose(t, bob, billing.OpUpgrade, "scale")
	second.ApplyErrs = []error{lost}
	_, err = f.confirm(bob, billing.OpUpgrade, "scale", later.ConfirmToken)
	wantCode(t, err, billing.CodeUpstreamUnavailable)

	f.store.RecordErr = func(r billing.Record) error {
		if r.ConfirmationID == stuck.ConfirmationID {
			return fmt.Errorf("write: %w", billing.ErrUnavailable)
		}
		return nil
	}
	f.store.Advance(time.Second)
	// A limit of one (hostile review): the row that fails on every try
	// does not use up the round.
	if _, err := f.svc.SettleUnknownOutcomes(context.Background(), time.Millisecond, 1); err != nil {
		t.Errorf("settle round: %v", err)
	}
	if c := f.confirmation(t, later.ConfirmationID); c.Status != billing.StatusExecuted {
		t.Errorf("the other org's change is %s after the round, want executed", c.Status)
	}
	if c := f.confirmation(t, stuck.ConfirmationID); c.Status != billing.StatusExecuting {
		t.Errorf("the one that cannot be recorded is %s, want executing", c.Status)
	}
}

// TestChangeNotMadePutsBackTheScheduledChange: a change made now that
// cancels a scheduled one; the release is made, the update fails with a
// 5xx, and the consent lapses (the policy now denies it) before it could be
// sent again. The change is recorded as not made, by the owner's retry or
// by the settler, and the scheduled change is put back at the provider and
// in billingd; the answer says so, or that it could not be.
func TestChangeNotMadePutsBackTheScheduledChange(t *testing.T) {
	for _, tc := range []struct {
		name        string
		bySettler   bool
		restoreErrs []error
		renewed     bool // the renewal made the scheduled change meanwhile
		say         string
	}{
		{name: "owner's retry", say: "the change to Pro scheduled for May 30, 2026 stays scheduled"},
		{name: "settler", bySettler: true},
		{name: "cannot put back yet", restoreErrs: []error{billing.ErrUnavailable}, say: "will be put back"},
		{name: "renewed first", renewed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newScaleFixture(t)
			first := f.cancellingChange(t)
			scheduled := first.Details.CancelsScheduledChange
			f.provider.ReadState.Schedule = nil // the release was made
			f.provider.ApplyErrs = []error{fmt.Errorf("stripe 500: %w: %w", billing.ErrUnavailable, billing.ErrProviderFailed)}
			_, err := f.confirm(alice, billing.OpDowngrade, "free", first.ConfirmToken)
			wantCode(t, err, billing.CodeUpstreamUnavailable)

			setPolicy(f, billing.Policy{Rules: []billing.PolicyRule{{Name: "no free", ToPlans: []string{"free"}, Action: billing.ActionDeny}}})
			f.store.Advance(time.Hour)
			f.provider.ApplyErrs = tc.restoreErrs
			if tc.renewed {
				f.provider.ReadState.PriceID = "price_billingd_pro"
			}
			calls := len(f.provider.ApplyCalls())
			if tc.bySettler {
				if _, err := f.svc.SettleUnknownOutcomes(context.Background(), time.Millisecond, 10); err != nil {
					t.Fatal(err)
				}
			} else {
				_, err = f.confirm(alice, billing.OpDowngrade, "free", first.ConfirmToken)
				wantCode(t, err, billing.CodeTokenInvalid)
				if msg := billing.PublicMessage(err); !strings.Contains(msg, "not made") || !strings.Contains(msg, tc.say) {
					t.Errorf("answer %q, want it to say the change was not made and %q", msg, tc.say)
				}
			}
			if c := f.confirmation(t, first.ConfirmationID); c.Status != billing.StatusFailed {
				t.Fatalf("status %s, want failed", c.Status)
			}
			sub, at := f.subscription(), f.provider.ReadState.Schedule
			if tc.renewed {
				msg := billing.PublicMessage(err)
				if strings.Contains(msg, "scheduled again") || !strings.Contains(msg, "took effect at the renewal") ||
					len(f.provider.ApplyCalls()) != calls || at != nil {
					t.Errorf("answer %q, %d requests after the renewal made the change, schedule %+v: want nothing put back",
						msg, len(f.provider.ApplyCalls())-calls, at)
				}
				return
			}
			if tc.restoreErrs != nil {
				if sub.Scheduled != nil || at.Scheduled() {
					t.Errorf("billingd shows %+v, the provider %+v: want nothing scheduled", sub.Scheduled, at)
				}
				return
			}
			if sub.Plan != "scale" || sub.Scheduled == nil || sub.Scheduled.ToPlan != "pro" ||
				sub.Scheduled.ConfirmationID != scheduled.ConfirmationID {
				t.Errorf("billingd shows %+v (scheduled %+v); want Scale with the Pro change scheduled again", sub, sub.Scheduled)
			}
			if !at.Scheduled() || at.ConfirmationID != scheduled.ConfirmationID || at.NextPriceID != "price_billingd_pro" {
				t.Errorf("at the provider: %+v, want the Pro change scheduled again", at)
			}
		})
	}
}

// previewHeld is a provider whose previews wait, once entered, until the
// test releases them.
type previewHeld struct {
	*billingtest.Provider
	entered, release chan struct{}
}

func (p previewHeld) PreviewPlanChange(ctx context.Context, change billing.PlanChange) (billing.Preview, error) {
	p.entered <- struct{}{}
	<-p.release
	return p.Provider.PreviewPlanChange(ctx, change)
}

// TestFirstCallRacingARecoveryPointIsNotIssued: Bob's preview is in flight
// while Alice's upgrade commits its recovery point and reaches Stripe (its
// answer lost, or made and recorded). Bob's quote, from the old plan, is not
// issued: he is told to retry, and no token is stored.
func TestFirstCallRacingARecoveryPointIsNotIssued(t *testing.T) {
	for _, tc := range []struct {
		name  string
		alice []error // Alice's provider answers
	}{
		{name: "still executing", alice: []error{fmt.Errorf("timeout: %w", billing.ErrUnavailable)}},
		{name: "recorded meanwhile"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newHandshakeFixture(t)
			bob := billing.Caller{Org: "org_vb", Principal: "bob", Client: "agent-2", RequestID: "req-2"}
			held := previewHeld{Provider: f.provider, entered: make(chan struct{}), release: make(chan struct{})}
			bobs := f.serviceWith(t, held)
			mine := f.propose(t, alice, billing.OpUpgrade, "scale")

			type answer struct {
				res billing.ChangeResult
				err error
			}
			done := make(chan answer, 1)
			go func() {
				res, err := bobs.ChangePlan(context.Background(), bob, billing.ChangeRequest{Operation: billing.OpUpgrade, To: "scale"})
				done <- answer{res, err}
			}()
			<-held.entered
			f.provider.ApplyErrs = tc.alice
			if _, err := f.confirm(alice, billing.OpUpgrade, "scale", mine.ConfirmToken); len(tc.alice) == 0 && err != nil {
				t.Fatalf("alice's second call: %v", err)
			}
			close(held.release)
			got := <-done
			wantCode(t, got.err, billing.CodeUpstreamUnavailable)
			if got.res.Proposed() {
				t.Errorf("bob was issued %q, quoted from the plan Alice's change replaces", got.res.Summary)
			}
			if list, err := f.store.PendingConfirmations(context.Background(), "org_vb", "bob"); err != nil || len(list) != 0 {
				t.Errorf("bob's pending confirmations %+v, %v: want none", list, err)
			}
		})
	}
}

// TestKeepOnAThirdPriceSaysTheScheduledChangeIsGone: the keep's release was
// made, and the subscription was moved to a third price elsewhere: the keep
// is not made, the change scheduled from the old price is not made again on
// the new one (nobody agreed to it), and the answer says it was cancelled.
func TestKeepOnAThirdPriceSaysTheScheduledChangeIsGone(t *testing.T) {
	f := newScaleFixture(t)
	f.svc = f.serviceWith(t, thirdPriceAtRelease{f.provider})
	f.schedule(t)
	keep := f.propose(t, alice, billing.OpUpgrade, "scale")
	calls := len(f.provider.ApplyCalls())
	_, err := f.confirm(alice, billing.OpUpgrade, "scale", keep.ConfirmToken)
	if msg := billing.PublicMessage(err); !strings.Contains(msg, "was cancelled at the payment provider") {
		t.Errorf("answer %q does not say the scheduled change was cancelled", msg)
	}
	if n := len(f.provider.ApplyCalls()) - calls; n != 1 || f.provider.ReadState.Schedule != nil {
		t.Errorf("%d requests, schedule %+v: want the release alone", n, f.provider.ReadState.Schedule)
	}
	if sub := f.subscription(); sub.Scheduled != nil {
		t.Errorf("billingd shows %+v scheduled; Stripe has nothing", sub.Scheduled)
	}
}

// declinedWithRestoreOwed: a change made now that cancels the scheduled
// Pro change; its release is made, the card is declined and putting the
// scheduled change back fails with a 5xx: the answer says it will be put
// back, and the confirmation owes it.
func declinedWithRestoreOwed(t *testing.T) (handshakeFixture, billing.ChangeResult) {
	t.Helper()
	f := newScaleFixture(t)
	first := f.cancellingChange(t)
	f.provider.ReadState.Schedule = nil // the release was made
	f.provider.ApplyErrs = []error{fmt.Errorf("card: %w", billing.ErrPaymentDeclined),
		fmt.Errorf("stripe 500: %w: %w", billing.ErrUnavailable, billing.ErrProviderFailed)}
	_, err := f.confirm(alice, billing.OpDowngrade, "free", first.ConfirmToken)
	wantCode(t, err, billing.CodePaymentFailed)
	if msg := billing.PublicMessage(err); !strings.Contains(msg, "will be put back") {
		t.Errorf("answer %q, want it to say the scheduled change will be put back", msg)
	}
	if c := f.confirmation(t, first.ConfirmationID); !c.Restore.Owed {
		t.Fatalf("restore %+v, want owed", c.Restore)
	}
	return f, first
}

// TestOwedRestoreIsMadeByTheSettler: putting back the released scheduled
// change failed once (a 5xx); the settler's next round puts it back at the
// provider, under a key of its own, and in billingd, and the debt is
// settled.
func TestOwedRestoreIsMadeByTheSettler(t *testing.T) {
	f, first := declinedWithRestoreOwed(t)
	scheduled := first.Details.CancelsScheduledChange
	f.store.Advance(time.Minute)
	if _, err := f.svc.RestoreReleasedChanges(context.Background(), 10); err != nil {
		t.Fatal(err)
	}
	sub, at := f.subscription(), f.provider.ReadState.Schedule
	if sub.Scheduled == nil || sub.Scheduled.ToPlan != "pro" || sub.Scheduled.ConfirmationID != scheduled.ConfirmationID {
		t.Errorf("billingd shows scheduled %+v; want the Pro change scheduled again", sub.Scheduled)
	}
	if !at.Scheduled() || at.ConfirmationID != scheduled.ConfirmationID || at.NextPriceID != "price_billingd_pro" {
		t.Errorf("at the provider: %+v, want the Pro change scheduled again", at)
	}
	if c := f.confirmation(t, first.ConfirmationID); c.Restore.Owed || c.Restore.Settled != "restored" {
		t.Errorf("restore %+v, want settled as restored", c.Restore)
	}
	if calls := f.provider.ApplyCalls(); len(calls) < 2 || calls[len(calls)-1].Key == calls[len(calls)-2].Key {
		t.Errorf("requests %+v: the retry must not reuse the failed attempt's idempotency key", calls)
	}
}

// TestOwedRestoreFailingAgainStaysOwed: the retry fails too; the debt
// stays, with the attempt counted, and the round goes on.
func TestOwedRestoreFailingAgainStaysOwed(t *testing.T) {
	f, first := declinedWithRestoreOwed(t)
	f.provider.ApplyErrs = []error{billing.ErrUnavailable}
	if _, err := f.svc.RestoreReleasedChanges(context.Background(), 10); err != nil {
		t.Fatal(err)
	}
	if c := f.confirmation(t, first.ConfirmationID); !c.Restore.Owed || c.Restore.Tries != 1 {
		t.Errorf("restore %+v, want still owed after one try", c.Restore)
	}
}

// TestOwedRestoreAfterANewerChangeIsNotMade: the person made another change
// since (the upgrade, this time paid): it is their newer decision, and the
// scheduled change it cancelled is not put back.
func TestOwedRestoreAfterANewerChangeIsNotMade(t *testing.T) {
	f, first := declinedWithRestoreOwed(t)
	f.store.Advance(time.Minute)
	f.provider.Preview = billing.Preview{Currency: "usd", ProrationCents: -2000}
	again := f.propose(t, alice, billing.OpDowngrade, "free")
	if _, err := f.confirm(alice, billing.OpDowngrade, "free", again.ConfirmToken); err != nil {
		t.Fatal(err)
	}
	f.store.Advance(time.Minute)
	if _, err := f.svc.RestoreReleasedChanges(context.Background(), 10); err != nil {
		t.Fatal(err)
	}
	if sub := f.subscription(); sub.Plan != "free" || sub.Scheduled != nil {
		t.Errorf("billingd shows %s scheduled %+v; want Free, nothing scheduled", sub.Plan, sub.Scheduled)
	}
	if at := f.provider.ReadState.Schedule; at.Scheduled() {
		t.Errorf("at the provider: %+v, want nothing scheduled", at)
	}
	if c := f.confirmation(t, first.ConfirmationID); c.Restore.Owed || c.Restore.Settled == "restored" {
		t.Errorf("restore %+v, want settled without a restore", c.Restore)
	}
}

// TestOwedRestoreAfterAFailedReadBack: the read-back after the declined
// change fails, so billingd's copy still shows the scheduled change while
// Stripe has released it: the restore is owed all the same, and the
// settler puts it back rather than taking billingd's stale copy for it.
func TestOwedRestoreAfterAFailedReadBack(t *testing.T) {
	f := newScaleFixture(t)
	first := f.cancellingChange(t)
	f.provider.ReadState.Schedule = nil // the release was made
	f.provider.ApplyErrs = []error{fmt.Errorf("card: %w", billing.ErrPaymentDeclined)}
	f.provider.ReadErrs = []error{nil, billing.ErrUnavailable} // the check passes; the read-back after the refusal fails
	_, err := f.confirm(alice, billing.OpDowngrade, "free", first.ConfirmToken)
	wantCode(t, err, billing.CodePaymentFailed)
	if c := f.confirmation(t, first.ConfirmationID); !c.Restore.Owed {
		t.Fatalf("restore %+v, want owed", c.Restore)
	}
	f.store.Advance(time.Minute)
	if _, err := f.svc.RestoreReleasedChanges(context.Background(), 10); err != nil {
		t.Fatal(err)
	}
	if at := f.provider.ReadState.Schedule; !at.Scheduled() || at.NextPriceID != "price_billingd_pro" {
		t.Errorf("at the provider: %+v, want the Pro change scheduled again", at)
	}
	if c := f.confirmation(t, first.ConfirmationID); c.Restore.Settled != "restored" {
		t.Errorf("restore %+v, want settled as restored", c.Restore)
	}
}
