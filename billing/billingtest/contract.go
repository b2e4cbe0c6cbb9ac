// Package billingtest holds test doubles for the billing package and what
// tests of billing.Store implementations share, as net/http/httptest does for
// net/http: Store, an in-memory billing.Store with a clock that stands still;
// Provider, a payment provider that honours idempotency keys; and
// RunStoreContract, a suite that Store and the PostgreSQL store
// (internal/postgres) both run, so the fake the handshake's unit tests rely on
// cannot drift from the real store.
package billingtest

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/billingd/billingd/billing"
)

// MakeStore returns an empty store for one test.
type MakeStore func(t *testing.T) billing.Store

// RunStoreContract runs the behaviour every billing.Store must have against
// stores made by newStore. It reads time only from what the store returns
// (its clock may be the database's or a frozen one).
func RunStoreContract(t *testing.T, newStore MakeStore) {
	cases := []struct {
		name string
		run  func(t *testing.T, s billing.Store)
	}{
		{"account not found", testAccountNotFound},
		{"account round trip", testAccountRoundTrip},
		{"issue supersedes only the caller's own pending confirmation", testIssueSupersedes},
		{"a token is found only by its owner", testLockByTokenOwner},
		{"a failed transaction leaves no trace", testRollback},
		{"record: executed with attempt, answer and a new subscription version", testRecordExecuted},
		{"a transaction reads what it recorded", testReadsOwnRecord},
		{"unsettled: seen by the other confirmations of the org and by the reconciler", testUnsettled},
		{"issue re-checks that nothing executes and the version quoted is current", testIssueRechecks},
		{"counts: recent activity and executed changes, on the store and in a transaction", testCounts},
		{"audit log newest first, paged", testAuditPaging},
		{"provider events are processed once", testEventsOnce},
		{"a scheduled change and a period-end confirmation round trip; a due one is found", testScheduled},
		{"an owed restore: recorded, found by the settler, skipped, settled", testOwedRestore},
		{"approvers: N kept from issue, counted, raised; a lapsed approval is found, skipped, rejected", testApprovers},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, newStore(t)) })
	}
}

var ctx = context.Background()

// Account returns an org on pro with its subscription, as the contract
// seeds it.
func Account(org string) billing.Account {
	return billing.Account{
		Org: billing.Org{ID: org, Name: "Org " + org, StripeCustomerID: "cus_" + org},
		Subscription: billing.Subscription{Org: org, StripeSubscriptionID: "sub_" + org, StripeItemID: "si_" + org,
			Plan: "pro", Status: "active", CurrentPeriodEnd: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC), Version: 1},
	}
}

func seed(t *testing.T, s billing.Store, org string) billing.Account {
	t.Helper()
	a := Account(org)
	if err := s.CreateAccount(ctx, a); err != nil {
		t.Fatalf("create account: %v", err)
	}
	return a
}

// Pending is a confirmation of principal's, bound to token.
func Pending(org, principal, id, token string) billing.Confirmation {
	h := sha256.Sum256([]byte(token))
	return billing.Confirmation{
		ID: id, TokenHash: h[:], Org: org, Principal: principal, Client: "agent", Operation: billing.OpUpgrade,
		Status: billing.StatusPending, Summary: "Upgrade " + org,
		Terms: billing.Terms{FromPlan: "pro", ToPlan: "scale", FromPriceID: "price_pro", ToPriceID: "price_scale",
			FromAmountCents: 1900, ToAmountCents: 4900, Currency: "usd", ProrationDate: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC),
			SubscriptionVer: 1, AmountDueCents: 1742, NextChargeAt: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)},
	}
}

// TokenHash is the hash a store keeps of token.
func TokenHash(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

func issue(t *testing.T, s billing.Store, c billing.Confirmation) billing.Confirmation {
	t.Helper()
	got, err := s.IssueConfirmation(ctx, c, time.Minute, billing.AuditEvent{Event: billing.EventTokenIssued,
		Org: c.Org, Principal: c.Principal, Client: c.Client, Operation: string(c.Operation), Outcome: "ok", RequestID: "req"})
	if err != nil {
		t.Fatalf("issue %s: %v", c.ID, err)
	}
	return got
}

func testAccountNotFound(t *testing.T, s billing.Store) {
	if _, _, err := s.Account(ctx, "nobody"); !errors.Is(err, billing.ErrNotFound) {
		t.Fatalf("err = %v, want ErrNotFound", err)
	}
}

func testAccountRoundTrip(t *testing.T, s billing.Store) {
	want := seed(t, s, "round")
	got, now, err := s.Account(ctx, "round")
	if err != nil {
		t.Fatal(err)
	}
	if now.IsZero() || got.Org != want.Org || got.Subscription.Plan != "pro" || got.Subscription.Org != "round" ||
		!got.Subscription.CurrentPeriodEnd.Equal(want.Subscription.CurrentPeriodEnd) || got.Unsettled {
		t.Fatalf("account %+v at %s, want %+v", got, now, want)
	}
}

func testIssueSupersedes(t *testing.T, s billing.Store) {
	seed(t, s, "sup")
	first := issue(t, s, Pending("sup", "alice", "cfm_first", "tok-first"))
	if !first.ExpiresAt.After(first.CreatedAt) || first.ExpiresAt.Sub(first.CreatedAt) != time.Minute {
		t.Fatalf("created %s expires %s, want a minute apart", first.CreatedAt, first.ExpiresAt)
	}
	issue(t, s, Pending("sup", "bob", "cfm_bob", "tok-bob"))
	issue(t, s, Pending("sup", "alice", "cfm_second", "tok-second"))
	list, err := s.PendingConfirmations(ctx, "sup", "")
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, c := range list {
		ids[c.ID] = true
	}
	if len(ids) != 2 || !ids["cfm_second"] || !ids["cfm_bob"] {
		t.Fatalf("pending %v, want cfm_second and cfm_bob", ids)
	}
	mine, err := s.PendingConfirmations(ctx, "sup", "alice")
	if err != nil || len(mine) != 1 || mine[0].ID != "cfm_second" {
		t.Fatalf("alice's pending %+v, %v", mine, err)
	}
	events, err := s.AuditEvents(ctx, "sup", 10, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := names(events); got != "TOKEN_ISSUED TOKEN_REVOKED:superseded TOKEN_ISSUED TOKEN_ISSUED" {
		t.Fatalf("audit (newest first) %s", got)
	}
}

func testLockByTokenOwner(t *testing.T, s billing.Store) {
	seed(t, s, "own")
	issue(t, s, Pending("own", "alice", "cfm_own", "tok-own"))
	hashless := Pending("own", "bob", "cfm_own_hashless", "")
	hashless.TokenHash = []byte{}
	issue(t, s, hashless)
	err := s.InTx(ctx, func(tx billing.Tx) error {
		if _, _, _, err := tx.LockByToken(ctx, "own", "mallory", TokenHash("tok-own")); !errors.Is(err, billing.ErrNotFound) {
			return fmt.Errorf("another principal: %v, want ErrNotFound", err)
		}
		// A string of no token's shape is looked up by no hash (nil),
		// which finds nothing, not even a row whose hash is empty.
		for _, p := range []string{"alice", "bob"} {
			if _, _, _, err := tx.LockByToken(ctx, "own", p, nil); !errors.Is(err, billing.ErrNotFound) {
				return fmt.Errorf("no hash, %s: %v, want ErrNotFound", p, err)
			}
		}
		c, a, now, err := tx.LockByToken(ctx, "own", "alice", TokenHash("tok-own"))
		if err != nil {
			return err
		}
		if c.ID != "cfm_own" || c.Status != billing.StatusPending || c.Terms.AmountDueCents != 1742 ||
			a.Org.ID != "own" || a.Subscription.Version != 1 || now.IsZero() || a.Unsettled {
			return fmt.Errorf("locked %+v / %+v at %s", c, a, now)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func testRollback(t *testing.T, s billing.Store) {
	seed(t, s, "rb")
	issue(t, s, Pending("rb", "alice", "cfm_rb", "tok-rb"))
	boom := errors.New("boom")
	err := s.InTx(ctx, func(tx billing.Tx) error {
		sub := Account("rb").Subscription
		sub.Plan = "scale"
		if err := tx.Record(ctx, billing.Record{ConfirmationID: "cfm_rb", Status: billing.StatusExecuted, Subscription: &sub,
			Events: []billing.AuditEvent{{Event: billing.EventOperationExecuted, Org: "rb", Principal: "alice"}}}); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("InTx = %v, want fn's error", err)
	}
	a, _, _ := s.Account(ctx, "rb")
	list, _ := s.PendingConfirmations(ctx, "rb", "")
	events, _ := s.AuditEvents(ctx, "rb", 10, 0)
	if a.Subscription.Plan != "pro" || a.Subscription.Version != 1 || len(list) != 1 || names(events) != "TOKEN_ISSUED" {
		t.Fatalf("after rollback: plan %s v%d, %d pending, audit %s", a.Subscription.Plan, a.Subscription.Version, len(list), names(events))
	}
}

func testRecordExecuted(t *testing.T, s billing.Store) {
	seed(t, s, "rec")
	issue(t, s, Pending("rec", "alice", "cfm_rec", "tok-rec"))
	attempt := 2
	result := billing.ChangeResult{OK: true, Subscription: &billing.SubscriptionView{Plan: "scale", Status: "active",
		CurrentPeriodEnd: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}}
	sub := Account("rec").Subscription
	sub.Plan, sub.StripeItemID = "scale", "si_new"
	inTx(t, s, func(tx billing.Tx) error {
		return tx.Record(ctx, billing.Record{ConfirmationID: "cfm_rec", Status: billing.StatusExecuted, Subscription: &sub,
			Attempt: &attempt, Result: &result,
			Events: []billing.AuditEvent{{Event: billing.EventOperationExecuted, Org: "rec", Principal: "alice", ConfirmationID: "cfm_rec", Outcome: "ok"}}})
	})
	inTx(t, s, func(tx billing.Tx) error {
		c, a, _, err := tx.LockByToken(ctx, "rec", "alice", TokenHash("tok-rec"))
		if err != nil {
			return err
		}
		if c.Status != billing.StatusExecuted || c.Attempt != 2 || c.Result == nil || c.Result.Subscription.Plan != "scale" ||
			a.Subscription.Plan != "scale" || a.Subscription.Version != 2 || a.Subscription.StripeItemID != "si_new" {
			return fmt.Errorf("after record: %+v (result %+v) / %+v", c, c.Result, a.Subscription)
		}
		return nil
	})
	if list, _ := s.PendingConfirmations(ctx, "rec", ""); len(list) != 0 {
		t.Fatalf("an executed confirmation is still listed as pending: %+v", list)
	}
}

func testScheduled(t *testing.T, s billing.Store) {
	seed(t, s, "sched")
	_, now, err := s.Account(ctx, "sched")
	if err != nil {
		t.Fatal(err)
	}
	due := now.Add(-time.Hour).UTC().Truncate(time.Microsecond)
	scheduled := &billing.ScheduledChange{ToPlan: "free", At: due, ConfirmationID: "cfm_sched", ScheduleID: "sub_sched_1", PriceID: "price_free"}
	c := Pending("sched", "alice", "cfm_sched", "tok-sched")
	c.Operation, c.Terms.ToPlan, c.Terms.AtPeriodEnd = billing.OpDowngrade, "free", true
	c.Terms.AtRenewal = &billing.Amounts{AmountDueCents: 110, SubtotalCents: 100, TaxCents: 10}
	c.Terms.Cancels = &billing.ScheduledChange{ToPlan: "pro", At: due, PriceID: "price_pro"}
	issue(t, s, c)
	sub := Account("sched").Subscription
	sub.Scheduled = scheduled
	inTx(t, s, func(tx billing.Tx) error { return tx.Record(ctx, billing.Record{Subscription: &sub}) })
	inTx(t, s, func(tx billing.Tx) error {
		got, a, _, err := tx.LockByToken(ctx, "sched", "alice", TokenHash("tok-sched"))
		if err != nil {
			return err
		}
		if !got.Terms.AtPeriodEnd || got.Terms.AtRenewal == nil || *got.Terms.AtRenewal != *c.Terms.AtRenewal ||
			got.Terms.Cancels == nil || got.Terms.Cancels.ToPlan != "pro" || !got.Terms.Cancels.At.Equal(due) {
			return fmt.Errorf("terms after round trip: %+v (renewal %+v, cancels %+v)", got.Terms, got.Terms.AtRenewal, got.Terms.Cancels)
		}
		if sc := a.Subscription.Scheduled; sc == nil || sc.ToPlan != "free" || !sc.At.Equal(due) || sc.ScheduleID != "sub_sched_1" ||
			sc.ConfirmationID != "cfm_sched" || sc.PriceID != "price_free" {
			return fmt.Errorf("scheduled after round trip: %+v", sc)
		}
		return nil
	})
	inTx(t, s, func(tx billing.Tx) error {
		if _, err := tx.LockDueScheduled(ctx, 2*time.Hour, nil); !errors.Is(err, billing.ErrNotFound) {
			return fmt.Errorf("within its grace: err = %v, want ErrNotFound", err)
		}
		a, err := tx.LockDueScheduled(ctx, time.Minute, nil)
		if err != nil || a.Org.ID != "sched" {
			return fmt.Errorf("due: %+v, %v", a.Org, err)
		}
		if _, err := tx.LockDueScheduled(ctx, time.Minute, []string{"sub_sched"}); !errors.Is(err, billing.ErrNotFound) {
			return fmt.Errorf("skipped: err = %v, want ErrNotFound", err)
		}
		return nil
	})
	sub.Scheduled = nil
	inTx(t, s, func(tx billing.Tx) error { return tx.Record(ctx, billing.Record{Subscription: &sub}) })
	if a, _, err := s.Account(ctx, "sched"); err != nil || a.Subscription.Scheduled != nil {
		t.Fatalf("after clearing: %+v, %v", a.Subscription.Scheduled, err)
	}
	inTx(t, s, func(tx billing.Tx) error {
		if _, err := tx.LockDueScheduled(ctx, time.Minute, nil); !errors.Is(err, billing.ErrNotFound) {
			return fmt.Errorf("nothing scheduled: err = %v, want ErrNotFound", err)
		}
		return nil
	})
}

// A store may hold a step's writes back until its next statement; the
// step must still read them.
func testReadsOwnRecord(t *testing.T, s billing.Store) {
	seed(t, s, "own-rec")
	issue(t, s, Pending("own-rec", "alice", "cfm_own_rec", "tok-own-rec"))
	zero := 0
	inTx(t, s, func(tx billing.Tx) error {
		if err := tx.Record(ctx, billing.Record{ConfirmationID: "cfm_own_rec", Status: billing.StatusExecuting, Attempt: &zero,
			Events: []billing.AuditEvent{{Event: billing.EventTokenValidated, Org: "own-rec", Principal: "alice"}}}); err != nil {
			return err
		}
		c, _, _, err := tx.LockByToken(ctx, "own-rec", "alice", TokenHash("tok-own-rec"))
		if err != nil || c.Status != billing.StatusExecuting {
			return fmt.Errorf("after recording executing: status %q, %v", c.Status, err)
		}
		return nil
	})
	if events, _ := s.AuditEvents(ctx, "own-rec", 10, 0); names(events) != "TOKEN_VALIDATED TOKEN_ISSUED" {
		t.Fatalf("audit after commit (newest first) %s", names(events))
	}
}

func testUnsettled(t *testing.T, s billing.Store) {
	seed(t, s, "uns")
	issue(t, s, Pending("uns", "alice", "cfm_exec", "tok-exec"))
	issue(t, s, Pending("uns", "bob", "cfm_other", "tok-other"))
	zero := 0
	inTx(t, s, func(tx billing.Tx) error {
		if _, _, _, err := tx.LockUnsettled(ctx, 0, nil); !errors.Is(err, billing.ErrNotFound) {
			return fmt.Errorf("nothing executing yet: %v, want ErrNotFound", err)
		}
		return tx.Record(ctx, billing.Record{ConfirmationID: "cfm_exec", Status: billing.StatusExecuting, Attempt: &zero})
	})
	if a, _, err := s.Account(ctx, "uns"); err != nil || !a.Unsettled {
		t.Fatalf("account while a change is executing: unsettled %t, %v", a.Unsettled, err)
	}
	inTx(t, s, func(tx billing.Tx) error {
		_, a, _, err := tx.LockByToken(ctx, "uns", "bob", TokenHash("tok-other"))
		if err != nil || !a.Unsettled {
			return fmt.Errorf("bob's confirmation while alice's executes: unsettled %t, %v", a.Unsettled, err)
		}
		_, a, _, err = tx.LockByToken(ctx, "uns", "alice", TokenHash("tok-exec"))
		if err != nil || a.Unsettled {
			return fmt.Errorf("the executing confirmation itself: unsettled %t, %v", a.Unsettled, err)
		}
		return nil
	})
	inTx(t, s, func(tx billing.Tx) error {
		if _, _, _, err := tx.LockUnsettled(ctx, time.Hour, nil); !errors.Is(err, billing.ErrNotFound) {
			return fmt.Errorf("attempted just now, idle an hour: %v, want ErrNotFound", err)
		}
		c, a, _, err := tx.LockUnsettled(ctx, 0, nil)
		if err != nil || c.ID != "cfm_exec" || a.Org.ID != "uns" {
			return fmt.Errorf("reconciler found %+v / %s: %v", c.ID, a.Org.ID, err)
		}
		return nil
	})
}

// testIssueRechecks: a quote made while another change began executing, or
// from a subscription version since replaced, is not issued, and nothing
// (no superseding, no audit) is written.
func testIssueRechecks(t *testing.T, s billing.Store) {
	seed(t, s, "rck")
	issue(t, s, Pending("rck", "alice", "cfm_exec", "tok-exec"))
	issue(t, s, Pending("rck", "bob", "cfm_bob", "tok-bob"))
	before, err := s.AuditEvents(ctx, "rck", 100, 0)
	if err != nil {
		t.Fatal(err)
	}
	zero := 0
	inTx(t, s, func(tx billing.Tx) error {
		return tx.Record(ctx, billing.Record{ConfirmationID: "cfm_exec", Status: billing.StatusExecuting, Attempt: &zero})
	})
	_, err = s.IssueConfirmation(ctx, Pending("rck", "bob", "cfm_late", "tok-late"), time.Minute,
		billing.AuditEvent{Event: billing.EventTokenIssued, Org: "rck", Principal: "bob", Outcome: "ok"})
	if !errors.Is(err, billing.ErrConflict) {
		t.Fatalf("issue while a change executes: %v, want ErrConflict", err)
	}
	inTx(t, s, func(tx billing.Tx) error {
		sub := Account("rck").Subscription
		sub.Plan = "scale"
		return tx.Record(ctx, billing.Record{ConfirmationID: "cfm_exec", Status: billing.StatusExecuted, Attempt: &zero,
			Subscription: &sub})
	})
	_, err = s.IssueConfirmation(ctx, Pending("rck", "bob", "cfm_stale", "tok-stale"), time.Minute,
		billing.AuditEvent{Event: billing.EventTokenIssued, Org: "rck", Principal: "bob", Outcome: "ok"})
	if !errors.Is(err, billing.ErrConflict) {
		t.Fatalf("issue quoted from version 1 after version 2: %v, want ErrConflict", err)
	}
	list, err := s.PendingConfirmations(ctx, "rck", "bob")
	if err != nil || len(list) != 1 || list[0].ID != "cfm_bob" {
		t.Fatalf("bob's pending confirmations %+v, %v: want cfm_bob alone, not superseded", list, err)
	}
	after, err := s.AuditEvents(ctx, "rck", 100, 0)
	if err != nil || len(after) != len(before) {
		t.Fatalf("%d audit events after refused issues, %d before (%v)", len(after), len(before), err)
	}
	late := Pending("rck", "bob", "cfm_now", "tok-now")
	late.Terms.SubscriptionVer = 2
	issue(t, s, late)
}

func testOwedRestore(t *testing.T, s billing.Store) {
	seed(t, s, "owe")
	issue(t, s, Pending("owe", "alice", "cfm_owe", "tok-owe"))
	inTx(t, s, func(tx billing.Tx) error {
		if _, _, _, err := tx.LockOwedRestore(ctx, nil); !errors.Is(err, billing.ErrNotFound) {
			return fmt.Errorf("nothing owed yet: %v, want ErrNotFound", err)
		}
		// Owed in the transaction that records the change not made.
		return tx.Record(ctx, billing.Record{ConfirmationID: "cfm_owe", Status: billing.StatusFailed, Failure: "payment_failed",
			Restore: &billing.RestoreDebt{Owed: true}})
	})
	inTx(t, s, func(tx billing.Tx) error {
		c, a, _, err := tx.LockOwedRestore(ctx, nil)
		if err != nil || c.ID != "cfm_owe" || a.Org.ID != "owe" || !c.Restore.Owed || c.Restore.Since.IsZero() ||
			c.Status != billing.StatusFailed {
			return fmt.Errorf("settler found %s (%+v, status %s) of %s: %v", c.ID, c.Restore, c.Status, a.Org.ID, err)
		}
		if _, _, _, err := tx.LockOwedRestore(ctx, []string{"cfm_owe"}); !errors.Is(err, billing.ErrNotFound) {
			return fmt.Errorf("skipped: %v, want ErrNotFound", err)
		}
		return tx.Record(ctx, billing.Record{ConfirmationID: "cfm_owe", Restore: &billing.RestoreDebt{Owed: true, Tries: 1}})
	})
	inTx(t, s, func(tx billing.Tx) error {
		c, _, _, err := tx.LockOwedRestore(ctx, nil)
		if err != nil || c.Restore.Tries != 1 || !c.Restore.Owed {
			return fmt.Errorf("after one try: %+v, %v", c.Restore, err)
		}
		return tx.Record(ctx, billing.Record{ConfirmationID: "cfm_owe", Restore: &billing.RestoreDebt{Tries: 2, Settled: "restored"}})
	})
	inTx(t, s, func(tx billing.Tx) error {
		if _, _, _, err := tx.LockOwedRestore(ctx, nil); !errors.Is(err, billing.ErrNotFound) {
			return fmt.Errorf("settled: %v, want ErrNotFound", err)
		}
		c, _, err := tx.LockByID(ctx, "owe", "cfm_owe")
		if err != nil || c.Restore.Owed || c.Restore.Settled != "restored" || c.Restore.Tries != 2 || c.Restore.Since.IsZero() {
			return fmt.Errorf("settled restore read back as %+v: %v", c.Restore, err)
		}
		return nil
	})
}

// testApprovers needs no clock: a negative skew makes a confirmation that
// expires in a minute count as lapsed.
func testApprovers(t *testing.T, s billing.Store) {
	seed(t, s, "apr")
	waiting := Pending("apr", "alice", "cfm_apr", "tok-apr")
	waiting.Approval, waiting.ApprovalsRequired = billing.ApprovalPending, 2
	issue(t, s, waiting)
	if got := issue(t, s, Pending("apr", "bob", "cfm_plain", "tok-plain")); got.ApprovalsRequired != 1 {
		t.Fatalf("a confirmation without approval needs %d approvals, want 1 (the default)", got.ApprovalsRequired)
	}
	readBack := func(tx billing.Tx) (billing.Confirmation, error) {
		c, _, err := tx.LockByID(ctx, "apr", "cfm_apr")
		return c, err
	}
	inTx(t, s, func(tx billing.Tx) error {
		if _, _, err := tx.LockLapsedApproval(ctx, 0, nil); !errors.Is(err, billing.ErrNotFound) {
			return fmt.Errorf("lapsed before its window ended: %v, want ErrNotFound", err)
		}
		c, _, err := tx.LockLapsedApproval(ctx, -2*time.Minute, nil)
		if err != nil || c.ID != "cfm_apr" || c.ApprovalsRequired != 2 || len(c.Approvers) != 0 {
			return fmt.Errorf("lapsed approval %s (needs %d, approvers %v): %v", c.ID, c.ApprovalsRequired, c.Approvers, err)
		}
		if _, _, err := tx.LockLapsedApproval(ctx, -2*time.Minute, []string{"cfm_apr"}); !errors.Is(err, billing.ErrNotFound) {
			return fmt.Errorf("skipped: %v, want ErrNotFound", err)
		}
		return tx.Record(ctx, billing.Record{ConfirmationID: "cfm_apr",
			Approval: &billing.ApprovalDecision{State: billing.ApprovalPending, Approver: "bob", Approvers: []string{"bob"}}})
	})
	list, err := s.PendingConfirmations(ctx, "apr", "alice")
	if err != nil || len(list) != 1 || list[0].ApprovalsRequired != 2 || len(list[0].Approvers) != 1 || list[0].Approvers[0] != "bob" {
		t.Fatalf("pending list %+v, %v: want cfm_apr approved by bob, needing 2", list, err)
	}
	inTx(t, s, func(tx billing.Tx) error {
		c, err := readBack(tx)
		if err != nil || c.Approval != billing.ApprovalPending || fmt.Sprint(c.Approvers) != "[bob]" || c.ApprovalsRequired != 2 {
			return fmt.Errorf("after one approval: %s %v of %d: %v", c.Approval, c.Approvers, c.ApprovalsRequired, err)
		}
		return tx.Record(ctx, billing.Record{ConfirmationID: "cfm_apr", Approval: &billing.ApprovalDecision{
			State: billing.ApprovalPending, Approver: "carol", Approvers: []string{"bob", "carol"}, Required: 3}})
	})
	inTx(t, s, func(tx billing.Tx) error {
		c, err := readBack(tx)
		if err != nil || fmt.Sprint(c.Approvers) != "[bob carol]" || c.ApprovalsRequired != 3 || c.Approver != "carol" {
			return fmt.Errorf("after a second approval and a raise: %v of %d by %s: %v", c.Approvers, c.ApprovalsRequired, c.Approver, err)
		}
		return tx.Record(ctx, billing.Record{ConfirmationID: "cfm_apr", Status: billing.StatusRejected, Failure: "expired",
			Approval: &billing.ApprovalDecision{State: billing.ApprovalRejected, Approver: "carol"}})
	})
	inTx(t, s, func(tx billing.Tx) error {
		if _, _, err := tx.LockLapsedApproval(ctx, -2*time.Minute, nil); !errors.Is(err, billing.ErrNotFound) {
			return fmt.Errorf("a rejected confirmation is not lapsed: %v, want ErrNotFound", err)
		}
		c, err := readBack(tx)
		if err != nil || c.Status != billing.StatusRejected || c.Failure != "expired" || c.Approval != billing.ApprovalRejected ||
			fmt.Sprint(c.Approvers) != "[bob carol]" || c.ApprovalsRequired != 3 {
			return fmt.Errorf("rejected as expired: %s %s %s %v of %d: %v", c.Status, c.Failure, c.Approval, c.Approvers, c.ApprovalsRequired, err)
		}
		return nil
	})
}

func testCounts(t *testing.T, s billing.Store) {
	seed(t, s, "cnt")
	issue(t, s, Pending("cnt", "alice", "cfm_c1", "tok-c1"))
	if err := s.AppendAudit(ctx,
		billing.AuditEvent{Event: billing.EventOperationDenied, Org: "cnt", Principal: "alice", Reason: "daily limit"},
		billing.AuditEvent{Event: billing.EventOperationDenied, Org: "cnt", Principal: "alice", ConfirmationID: "cfm_c1", Reason: "policy"},
		billing.AuditEvent{Event: billing.EventOperationDenied, Org: "cnt", Principal: "alice", Operation: string(billing.ActSetPolicy),
			Reason: billing.ReasonPersonRequired},
		billing.AuditEvent{Event: billing.EventTokenRejected, Org: "cnt", Principal: "alice", Reason: "invalid"},
		billing.AuditEvent{Event: billing.EventOperationExecuted, Org: "cnt", Principal: "alice", ConfirmationID: "cfm_c1"},
		billing.AuditEvent{Event: billing.EventTokenIssued, Org: "cnt", Principal: "bob"},
	); err != nil {
		t.Fatal(err)
	}
	acct, a, err := s.AccountForCall(ctx, "cnt", "alice", time.Hour)
	if err != nil || acct.Org.ID != "cnt" {
		t.Fatalf("account for a call: org %q, %v", acct.Org.ID, err)
	}
	// Issued counts the token and the first call refused without one; a
	// denial at execution (with a confirmation) is not a first call, and
	// neither is an agent's refused loosening (person_required), which
	// changes nothing (contract §4).
	if a.Issued != 2 || a.Rejected != 1 || a.OldestIssued.IsZero() || a.OldestRejected.IsZero() || a.Now.IsZero() {
		t.Fatalf("recent activity %+v, want 2 issued and 1 rejected", a)
	}
	// A second call reads the same counts in its lock's round trip.
	inTx(t, s, func(tx billing.Tx) error {
		var got billing.Activity
		tx.ReadActivity("cnt", "alice", time.Hour, &got)
		if _, _, _, err := tx.LockByToken(ctx, "cnt", "alice", TokenHash("tok-c1")); err != nil {
			return err
		}
		if !sameCounts(got, a) || got.Now.IsZero() {
			return fmt.Errorf("activity read in a transaction %+v, want %+v", got, a)
		}
		return nil
	})
	if _, none, err := s.AccountForCall(ctx, "cnt", "alice", 0); err != nil || !sameCounts(none, billing.Activity{}) || none.Now.IsZero() {
		t.Fatalf("activity with the account over no window %+v: %v", none, err)
	}
	if _, _, err := s.AccountForCall(ctx, "nobody", "alice", time.Hour); !errors.Is(err, billing.ErrNotFound) {
		t.Fatalf("account for a call of an unknown org: %v, want ErrNotFound", err)
	}
	n, err := s.ExecutedSince(ctx, "cnt", time.Hour)
	if err != nil || n != 1 {
		t.Fatalf("executed since, on the store: %d, %v", n, err)
	}
	inTx(t, s, func(tx billing.Tx) error {
		if n, err := tx.ExecutedSince(ctx, "cnt", time.Hour); err != nil || n != 1 {
			return fmt.Errorf("executed since, in a transaction: %d, %v", n, err)
		}
		return nil
	})
}

func testAuditPaging(t *testing.T, s billing.Store) {
	seed(t, s, "page")
	for i := range 5 {
		if err := s.AppendAudit(ctx, billing.AuditEvent{Event: billing.EventPolicyUpdated, Org: "page", Reason: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	first, err := s.AuditEvents(ctx, "page", 2, 0)
	if err != nil || len(first) != 2 || first[0].Reason != "4" || first[1].Reason != "3" {
		t.Fatalf("first page %+v, %v", first, err)
	}
	next, err := s.AuditEvents(ctx, "page", 10, first[1].ID)
	if err != nil || len(next) != 3 || next[0].Reason != "2" || next[2].Reason != "0" {
		t.Fatalf("next page %+v, %v", next, err)
	}
	if other, _ := s.AuditEvents(ctx, "elsewhere", 10, 0); len(other) != 0 {
		t.Fatalf("another org sees %+v", other)
	}
}

func testEventsOnce(t *testing.T, s billing.Store) {
	for i, want := range []bool{true, false} {
		inTx(t, s, func(tx billing.Tx) error {
			first, err := tx.MarkEventProcessed(ctx, "evt_once")
			if err != nil || first != want {
				return fmt.Errorf("delivery %d: first %t, %v; want %t", i+1, first, err, want)
			}
			return nil
		})
	}
}

func inTx(t *testing.T, s billing.Store, fn func(billing.Tx) error) {
	t.Helper()
	if err := s.InTx(ctx, fn); err != nil {
		t.Fatal(err)
	}
}

func names(events []billing.AuditEvent) string {
	out := ""
	for i, e := range events {
		if i > 0 {
			out += " "
		}
		out += e.Event
		if e.Reason != "" {
			out += ":" + e.Reason
		}
	}
	return out
}

// sameCounts compares two activities but for their clocks.
func sameCounts(a, b billing.Activity) bool {
	return a.Issued == b.Issued && a.Rejected == b.Rejected &&
		a.OldestIssued.Equal(b.OldestIssued) && a.OldestRejected.Equal(b.OldestRejected)
}
