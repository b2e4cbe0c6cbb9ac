package stripepay

import (
	"context"
	"errors"
	"testing"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/stripepay/stripepaytest"
	"github.com/billingd/billingd/internal/testenv"
)

// TestStripeMockSeatsAndCancellation: every request change_seats,
// cancel_subscription and resume_subscription make is one Stripe's own
// API description accepts (stripe-mock validates each against it): a
// preview and an update of the quantity, the preview of cancelling now
// (subscription_details[cancel_now]), the cancellation now (DELETE with
// prorate, invoice_now, cancellation_details and the final invoice
// expanded), and cancel_at_period_end set and cleared.
func TestStripeMockSeatsAndCancellation(t *testing.T) {
	t.Parallel()
	p := New(Config{SecretKey: "sk_test_123", APIBase: testenv.StripeMock(t)})
	ctx := context.Background()
	seats := mockChange(true)
	seats.NewPriceID, seats.FromPriceID, seats.FromQuantity, seats.Quantity = "price_123", "price_123", 2, 5
	if _, err := p.PreviewPlanChange(ctx, seats); err != nil {
		t.Fatalf("preview seats: %v", err)
	}
	if _, err := p.ApplyPlanChange(ctx, seats, "conf_seats:apply"); err != nil {
		t.Fatalf("apply seats: %v", err)
	}
	for _, c := range []billing.Cancellation{billing.CancelNow, billing.CancelAtPeriodEnd, billing.Resume} {
		change := mockChange(false)
		change.Cancellation, change.CancelReason, change.CancelComment = c, "too_expensive", "we grew out of it"
		change.ConfirmationID = "cfm_123"
		if c == billing.CancelNow {
			if _, err := p.PreviewPlanChange(ctx, change); err != nil {
				t.Fatalf("preview cancelling now: %v", err)
			}
		}
		got, err := p.ApplyPlanChange(ctx, change, "conf_cancel:"+string(c))
		if err != nil {
			t.Fatalf("%s: %v", c, err)
		}
		if got.Status == "" {
			t.Errorf("%s: %+v", c, got)
		}
	}
}

// TestCancelNowRetriedByStripeGo: the answer to a cancellation is lost and
// stripe-go sends the DELETE again (its own network retry); Stripe, which
// ignores Idempotency-Key on DELETE, answers the retry 404. That is an
// outcome to read back, never a refusal: the subscription was cancelled.
func TestCancelNowRetriedByStripeGo(t *testing.T) {
	t.Parallel()
	env := newFakeEnv(t, Config{MaxNetworkRetries: 1})
	change := env.change(pricePro, false)
	change.Cancellation = billing.CancelNow
	env.fake.FailNextForAt(env.cust.SubscriptionID, stripepaytest.CancelSubscription, stripepaytest.DropConnection)
	_, err := env.p.ApplyPlanChange(context.Background(), change, "billingd-cfm_gone")
	if !errors.Is(err, billing.ErrUnavailable) || errors.Is(err, billing.ErrProviderRejected) {
		t.Fatalf("err %v, want an unknown outcome", err)
	}
	if sub, _ := env.fake.Subscription(env.cust.SubscriptionID); sub.Status != "canceled" {
		t.Fatalf("the fake: %+v", sub)
	}
}
