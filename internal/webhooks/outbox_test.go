package webhooks_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/postgres"
	"github.com/billingd/billingd/internal/testenv"
	"github.com/billingd/billingd/internal/webhooks"
)

// outbox is a migrated database with an org and the webhooks' store.
type outbox struct {
	t     *testing.T
	db    *testenv.Database
	store *postgres.Store
	hooks postgres.Webhooks
}

func newOutbox(t *testing.T) *outbox {
	t.Helper()
	db := testenv.NewDatabase(t)
	store := postgres.NewStore(db.Pool)
	o := &outbox{t: t, db: db, store: store, hooks: store.Webhooks()}
	err := store.CreateAccount(context.Background(), billing.Account{
		Org: billing.Org{ID: "acme", Name: "Acme", StripeCustomerID: "cus_1"},
		Subscription: billing.Subscription{StripeSubscriptionID: "sub_1", StripeItemID: "si_1", Plan: "pro",
			Status: "active", CurrentPeriodEnd: time.Now().Add(30 * 24 * time.Hour)},
	})
	if err != nil {
		t.Fatal(err)
	}
	return o
}

var admin = billing.Caller{Org: "acme", Principal: "root", Admin: true}

// endpoint registers url for events with guard g.
func (o *outbox) endpoint(g webhooks.Guard, url, format string, events ...string) webhooks.Endpoint {
	o.t.Helper()
	e, err := (&webhooks.Endpoints{People: everyonePerson{}, Store: o.hooks, Guard: g}).Create(context.Background(), admin,
		webhooks.CreateRequest{URL: url, Events: events, Format: format})
	if err != nil {
		o.t.Fatal(err)
	}
	return e
}

// audit writes events the way the handshake does (the trigger fans them out).
func (o *outbox) audit(events ...billing.AuditEvent) {
	o.t.Helper()
	if err := o.store.AppendAudit(context.Background(), events...); err != nil {
		o.t.Fatal(err)
	}
}

func failed(id string) billing.AuditEvent {
	return billing.AuditEvent{Event: billing.EventOperationFailed, Org: "acme", Principal: "alice", Client: "agent-x",
		Operation: "upgrade_plan", ConfirmationID: id, Outcome: "failed", Reason: "payment_failed"}
}

// deliveries reads the outbox rows: type, status, attempts, by id.
func (o *outbox) deliveries() []row {
	o.t.Helper()
	rows, err := o.db.Pool.Query(context.Background(), `SELECT d.event_id, d.type, d.status, d.attempts, d.data, e.url
		FROM webhook_deliveries d JOIN webhook_endpoints e ON e.id = d.endpoint_id ORDER BY d.id`)
	if err != nil {
		o.t.Fatal(err)
	}
	defer rows.Close()
	var out []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.EventID, &r.Type, &r.Status, &r.Attempts, &r.Data, &r.URL); err != nil {
			o.t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

type row struct {
	EventID, Type, Status string
	Attempts              int
	Data                  map[string]any
	URL                   string
}

// receiver records what it is sent and checks each signature with the
// specification's verifier; it answers 500 to the first failFirst requests.
type receiver struct {
	*httptest.Server
	t         *testing.T
	secrets   func() []string
	failFirst int64
	mu        sync.Mutex
	got       []received
	n         atomic.Int64
}

type received struct {
	id, signature string
	at            time.Time
	body          []byte
}

func newReceiver(t *testing.T, failFirst int64) *receiver {
	r := &receiver{t: t, failFirst: failFirst}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.got = append(r.got, received{req.Header.Get("webhook-id"), req.Header.Get("webhook-signature"), time.Now(), body})
		secrets := r.secrets
		r.mu.Unlock()
		for _, s := range secrets() {
			wh, _ := standardwebhooks.NewWebhook(s)
			if err := wh.Verify(body, req.Header); err != nil {
				t.Errorf("signature under %s…: %v", s[:10], err)
			}
		}
		if r.n.Add(1) <= r.failFirst {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) received() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]received(nil), r.got...)
}

// until runs the deliverer's rounds until done or 10 s.
func until(t *testing.T, d *webhooks.Deliverer, done func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !done() {
		if time.Now().After(deadline) {
			t.Fatal("not done in 10 s")
		}
		if _, err := d.RunOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestDeliveryRetriedUntilAccepted: a receiver that fails on purpose three
// times gets the same event (one webhook-id), validly signed, four times,
// the waits growing as the schedule says; then it is delivered, and the
// endpoint's list shows it.
func TestDeliveryRetriedUntilAccepted(t *testing.T) {
	o := newOutbox(t)
	r := newReceiver(t, 3)
	open := webhooks.Guard{AllowPrivate: true}
	e := o.endpoint(open, r.URL, "", webhooks.ChangeFailed)
	r.secrets = func() []string { return []string{e.Secret} }
	o.audit(failed("cfm_1"))
	schedule := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, time.Hour}
	d := &webhooks.Deliverer{Store: o.hooks, Guard: open, Schedule: schedule}
	var attempts []int
	until(t, d, func() bool {
		rows := o.deliveries()
		if len(rows) != 1 {
			t.Fatalf("outbox %v", rows)
		}
		if len(attempts) == 0 || attempts[len(attempts)-1] != rows[0].Attempts {
			attempts = append(attempts, rows[0].Attempts)
		}
		return rows[0].Status == webhooks.StatusDelivered
	})
	got := r.received()
	if len(got) != 4 {
		t.Fatalf("received %d times, want 4", len(got))
	}
	for i, g := range got {
		if g.id != got[0].id || !strings.HasPrefix(g.id, "evt_") {
			t.Fatalf("webhook-id %q of attempt %d, first %q", g.id, i+1, got[0].id)
		}
		if i > 0 {
			if wait := g.at.Sub(got[i-1].at); wait < schedule[i-1] {
				t.Errorf("attempt %d came %s after the last, want at least %s", i+1, wait, schedule[i-1])
			}
		}
	}
	var body struct {
		ID, Type, Org string
		Data          map[string]any
	}
	if err := json.Unmarshal(got[3].body, &body); err != nil || body.ID != got[0].id || body.Type != "change.failed" ||
		body.Org != "acme" || body.Data["reason"] != "payment_failed" || body.Data["confirmation_id"] != "cfm_1" {
		t.Fatalf("body %s (%v)", got[3].body, err)
	}
	list, err := (&webhooks.Endpoints{People: everyonePerson{}, Store: o.hooks}).List(context.Background(), admin)
	if err != nil || len(list) != 1 || list[0].Secret != "" || len(list[0].Recent) != 1 {
		t.Fatalf("list %+v %v", list, err)
	}
	if rec := list[0].Recent[0]; rec.Status != "delivered" || rec.Attempts != 4 || rec.LastStatus != 204 {
		t.Fatalf("recent delivery %+v", rec)
	}
	t.Logf("attempts seen: %v", attempts)
}

// TestDeliveryGivesUp: after the schedule's last wait and one more failure
// the delivery is failed, not retried for ever.
func TestDeliveryGivesUp(t *testing.T) {
	o := newOutbox(t)
	r := newReceiver(t, 1000)
	open := webhooks.Guard{AllowPrivate: true}
	e := o.endpoint(open, r.URL, "", webhooks.ChangeFailed)
	r.secrets = func() []string { return []string{e.Secret} }
	o.audit(failed("cfm_1"))
	var outcomes []string
	d := &webhooks.Deliverer{Store: o.hooks, Guard: open, Schedule: []time.Duration{50 * time.Millisecond},
		Observe: func(s string) { outcomes = append(outcomes, s) }}
	until(t, d, func() bool { return o.deliveries()[0].Status == webhooks.StatusFailed })
	if rows := o.deliveries(); rows[0].Attempts != 2 || len(r.received()) != 2 {
		t.Fatalf("rows %+v, received %d", rows, len(r.received()))
	}
	if strings.Join(outcomes, ",") != "retrying,failed" {
		t.Fatalf("observed %v", outcomes)
	}
}

// TestRotationSignsTwice: after a rotation, deliveries carry a signature
// under each secret (the receiver verifies with either), the old one for
// 24 hours.
func TestRotationSignsTwice(t *testing.T) {
	o := newOutbox(t)
	r := newReceiver(t, 0)
	open := webhooks.Guard{AllowPrivate: true}
	old := o.endpoint(open, r.URL, "", webhooks.ChangeFailed)
	rotated, err := (&webhooks.Endpoints{People: everyonePerson{}, Store: o.hooks}).RotateSecret(context.Background(), admin, old.ID)
	if err != nil {
		t.Fatal(err)
	}
	if rotated.Secret == "" || rotated.Secret == old.Secret || rotated.PreviousSecretUntil == nil ||
		time.Until(*rotated.PreviousSecretUntil) < 23*time.Hour {
		t.Fatalf("rotated %+v", rotated)
	}
	r.secrets = func() []string { return []string{old.Secret, rotated.Secret} }
	o.audit(failed("cfm_1"))
	d := &webhooks.Deliverer{Store: o.hooks, Guard: open}
	until(t, d, func() bool { return len(r.received()) == 1 })
	if sigs := strings.Fields(r.received()[0].signature); len(sigs) != 2 {
		t.Fatalf("signature header %q, want two", r.received()[0].signature)
	}
	if _, err := (&webhooks.Endpoints{People: everyonePerson{}, Store: o.hooks}).RotateSecret(context.Background(), admin, "we_nope"); billing.ErrorCode(err) != billing.CodeNotFound {
		t.Fatalf("rotating an unknown endpoint: %v", err)
	}
}

// rebinding resolves the name to a public address once (the creation-time
// check), then to loopback.
type rebinding struct{ n atomic.Int64 }

func (r *rebinding) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	if r.n.Add(1) == 1 {
		return []netip.Addr{netip.MustParseAddr("93.184.216.34")}, nil
	}
	return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
}

// TestDeliveryRefusesPrivateAddresses: with private networks not allowed,
// an endpoint whose name resolves to loopback is refused at creation, and
// one that resolved to a public address then and to loopback at delivery
// time (DNS rebinding) is not sent to: the attempt fails and is retried.
func TestDeliveryRefusesPrivateAddresses(t *testing.T) {
	o := newOutbox(t)
	r := newReceiver(t, 0)
	r.secrets = func() []string { return nil }
	_, err := (&webhooks.Endpoints{People: everyonePerson{}, Store: o.hooks, Guard: webhooks.Guard{}}).Create(context.Background(), admin,
		webhooks.CreateRequest{URL: strings.Replace(r.URL, "http:", "https:", 1), Events: []string{webhooks.ChangeFailed}})
	if billing.ErrorCode(err) != billing.CodeInvalidRequest {
		t.Fatalf("creating an endpoint on loopback: %v, want invalid_request", err)
	}
	port := strconv.Itoa(r.Listener.Addr().(*net.TCPAddr).Port)
	strict := webhooks.Guard{Resolver: &rebinding{}}
	o.endpoint(strict, "https://hooks.rebind.example:"+port+"/services/T0/B0/SECRETPATH", "", webhooks.ChangeFailed)
	o.audit(failed("cfm_1"))
	d := &webhooks.Deliverer{Store: o.hooks, Guard: strict}
	if n, err := d.RunOnce(context.Background()); n != 1 || err != nil {
		t.Fatalf("round: %d %v", n, err)
	}
	var status, lastError string
	if err := o.db.Pool.QueryRow(context.Background(),
		`SELECT status, coalesce(last_error, '') FROM webhook_deliveries`).Scan(&status, &lastError); err != nil {
		t.Fatal(err)
	}
	if status != webhooks.StatusPending || !strings.Contains(lastError, "not public") || len(r.received()) != 0 ||
		strings.Contains(lastError, "SECRETPATH") {
		t.Fatalf("status %s, error %q, received %d", status, lastError, len(r.received()))
	}
}

// TestClaimLease: a claim is one replica's until its lease ends; one never
// recorded (its replica was killed) is claimed again after it, as a new
// attempt.
func TestClaimLease(t *testing.T) {
	o := newOutbox(t)
	o.endpoint(webhooks.Guard{AllowPrivate: true}, "http://127.0.0.1:9/", "", webhooks.ChangeFailed)
	o.audit(failed("cfm_1"))
	ctx := context.Background()
	// The lease is long enough for the claim below to come within it on a
	// loaded machine; the retake is then waited for, not slept for.
	first, err := o.hooks.ClaimDeliveries(ctx, 10, 2*time.Second)
	if err != nil || len(first) != 1 || first[0].Attempt != 1 {
		t.Fatalf("first claim %+v %v", first, err)
	}
	if again, err := o.hooks.ClaimDeliveries(ctx, 10, time.Second); err != nil || len(again) != 0 {
		t.Fatalf("claimed while leased: %+v %v", again, err)
	}
	var retaken []webhooks.Delivery
	deadline := time.Now().Add(10 * time.Second)
	for len(retaken) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("not claimed again within 10 s")
		}
		time.Sleep(50 * time.Millisecond)
		if retaken, err = o.hooks.ClaimDeliveries(ctx, 10, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if len(retaken) != 1 || retaken[0].Attempt != 2 || retaken[0].Lease == first[0].Lease {
		t.Fatalf("after the lease: %+v", retaken)
	}
	// The first claim's holder, back late, records nothing.
	if err := o.hooks.RecordOutcome(ctx, webhooks.Outcome{DeliveryID: first[0].ID, Lease: first[0].Lease,
		Status: webhooks.StatusDelivered}); err != nil {
		t.Fatal(err)
	}
	if rows := o.deliveries(); rows[0].Status != webhooks.StatusPending {
		t.Fatalf("a stale claim recorded its outcome: %+v", rows)
	}
}

// TestOutboxFromAudit: the trigger maps audit events to the types the
// org's endpoints asked for, one delivery per endpoint, in the event's
// transaction; other events and orgs without endpoints write nothing.
func TestOutboxFromAudit(t *testing.T) {
	o := newOutbox(t)
	open := webhooks.Guard{AllowPrivate: true}
	all := o.endpoint(open, "http://127.0.0.1:9/all", "", webhooks.EventTypes...)
	o.endpoint(open, "http://127.0.0.1:9/approvals", "slack", webhooks.ApprovalRequested, webhooks.ApprovalExpired)
	ctx := context.Background()

	// A first call of a change the policy holds for approval.
	now := time.Now()
	c := billing.Confirmation{ID: "cfm_appr", TokenHash: []byte("h1"), Org: "acme", Principal: "alice", Client: "agent-x",
		Operation: billing.OpUpgrade, Status: billing.StatusPending, Summary: "Upgrade Acme from Pro to Scale: $30.00 due now.",
		Approval: billing.ApprovalPending,
		Terms: billing.Terms{FromPlan: "pro", ToPlan: "scale", Currency: "usd", ProrationDate: now, NextChargeAt: now,
			AmountDueCents: 3000, SubscriptionVer: 1}}
	template := billing.AuditEvent{Event: billing.EventTokenIssued, Outcome: "ok", RequestID: "req_1"}
	issued, err := o.store.IssueConfirmation(ctx, c, time.Hour, template)
	if err != nil {
		t.Fatal(err)
	}
	// A first call under the verify level, and a downgrade at the period's
	// end executed (scheduled), each of another principal.
	v := c
	v.ID, v.TokenHash, v.Principal, v.Approval, v.VerifyRequired = "cfm_verify", []byte("h2"), "carol", "", true
	if _, err := o.store.IssueConfirmation(ctx, v, time.Hour, template); err != nil {
		t.Fatal(err)
	}
	pe := c
	pe.ID, pe.TokenHash, pe.Principal, pe.Approval, pe.Operation = "cfm_period_end", []byte("h3"), "dave", "", billing.OpDowngrade
	pe.Terms.AtPeriodEnd = true
	if _, err := o.store.IssueConfirmation(ctx, pe, time.Hour, template); err != nil {
		t.Fatal(err)
	}
	o.audit(billing.AuditEvent{Event: billing.EventOperationExecuted, Org: "acme", Principal: "dave", ConfirmationID: "cfm_period_end"})
	o.audit(
		billing.AuditEvent{Event: billing.EventTokenValidated, Org: "acme", Principal: "alice", ConfirmationID: "cfm_appr"},
		billing.AuditEvent{Event: billing.EventApprovalRejected, Org: "acme", Principal: "bob", ConfirmationID: "cfm_appr", Reason: "expired"},
		billing.AuditEvent{Event: "APPROVAL_EXPIRED", Org: "acme", Principal: "billingd", ConfirmationID: "cfm_appr"},
		billing.AuditEvent{Event: billing.EventApprovalRejected, Org: "acme", Principal: "bob", ConfirmationID: "cfm_other"},
	)
	_, err = o.db.Pool.Exec(ctx, `INSERT INTO audit_events (event, org, principal, client, operation, confirmation_id, outcome, reason, request_id, consent)
		VALUES ('OPERATION_EXECUTED', 'acme', 'alice', 'agent-x', 'upgrade_plan', 'cfm_mdt', 'ok', '', 'req_2',
			'{"method":"mandate","human_present":"none","mandate_id":"mdt_1"}')`)
	if err != nil {
		t.Fatal(err)
	}
	// Another org, without endpoints.
	if err := o.store.CreateAccount(ctx, billing.Account{Org: billing.Org{ID: "quiet", Name: "Q", StripeCustomerID: "cus_2"},
		Subscription: billing.Subscription{StripeSubscriptionID: "sub_2", Plan: "pro", Status: "active", CurrentPeriodEnd: now}}); err != nil {
		t.Fatal(err)
	}
	o.audit(billing.AuditEvent{Event: billing.EventOperationFailed, Org: "quiet", ConfirmationID: "cfm_q"})

	var got []string
	for _, r := range o.deliveries() {
		got = append(got, r.Type+"→"+r.URL[len("http://127.0.0.1:9/"):])
		if r.Type == webhooks.ApprovalRequested {
			d := r.Data
			if d["summary"] != c.Summary || d["requester"] != "alice" || d["agent"] != "agent-x" ||
				d["approvals_given"] != 0.0 || d["approvals_required"] != 1.0 || d["confirmation_id"] != "cfm_appr" ||
				d["expires_at"] != issued.ExpiresAt.UTC().Format(time.RFC3339) {
				t.Errorf("approval.requested data %v", d)
			}
		}
		if r.Type == webhooks.MandateUsed && r.Data["mandate_id"] != "mdt_1" {
			t.Errorf("mandate.used data %v", r.Data)
		}
	}
	want := []string{"approval.requested→all", "approval.requested→approvals", "verification.requested→all",
		"change.scheduled→all", "approval.expired→all",
		"approval.expired→approvals", "approval.rejected→all", "change.executed→all", "mandate.used→all"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("outbox:\n got %v\nwant %v", got, want)
	}
	if err := (&webhooks.Endpoints{People: everyonePerson{}, Store: o.hooks}).Delete(ctx, admin, all.ID); err != nil {
		t.Fatal(err)
	}
	if n := len(o.deliveries()); n != 2 { // approval.requested and approval.expired to the Slack one
		t.Fatalf("after deleting an endpoint %d deliveries remain, want its 2 others'", n)
	}
}

// TestOutboxFollowsTheTransaction: a step whose transaction rolls back
// leaves no delivery of its events; one that commits leaves them.
func TestOutboxFollowsTheTransaction(t *testing.T) {
	o := newOutbox(t)
	o.endpoint(webhooks.Guard{AllowPrivate: true}, "http://127.0.0.1:9/", "", webhooks.ChangeFailed)
	ctx := context.Background()
	errStep := errors.New("the step failed")
	err := o.store.InTx(ctx, func(tx billing.Tx) error {
		if err := tx.Record(ctx, billing.Record{Events: []billing.AuditEvent{failed("cfm_rolled_back")}}); err != nil {
			return err
		}
		return errStep
	})
	if !errors.Is(err, errStep) {
		t.Fatal(err)
	}
	if rows := o.deliveries(); len(rows) != 0 {
		t.Fatalf("a rolled-back event was delivered: %+v", rows)
	}
	err = o.store.InTx(ctx, func(tx billing.Tx) error {
		return tx.Record(ctx, billing.Record{Events: []billing.AuditEvent{failed("cfm_committed")}})
	})
	if rows := o.deliveries(); err != nil || len(rows) != 1 || rows[0].Data["confirmation_id"] != "cfm_committed" {
		t.Fatalf("committed: %v %+v", err, rows)
	}
}

// everyonePerson takes every caller for a person: these tests are about
// the outbox; who may manage endpoints is billing's rule (integration's
// TestAgentAdminCannotLoosenTheGate).
type everyonePerson struct{}

func (everyonePerson) RequirePerson(context.Context, billing.Caller, billing.Act) error { return nil }
