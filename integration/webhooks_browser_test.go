package integration

import (
	"context"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/billingd/billingd/billing"
)

// TestWebhookDeliveriesInDashboard: an admin's dashboard lists the org's
// webhook endpoints with their recent deliveries: event, status, attempts
// and the receiver's last answer.
func TestWebhookDeliveriesInDashboard(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withEnv("WEBHOOK_ALLOW_PRIVATE_NETWORKS", "true"), withEnv("WEBHOOK_POLL_INTERVAL", "100ms"))
	h.createOrg("hookweb", "Hook Web", "pro")
	recv := newHookReceiver(t, 0)
	e := h.addEndpoint("hookweb", map[string]any{"url": recv.URL + "/std", "events": []string{"change.failed"}})
	recv.mu.Lock()
	recv.secrets["/std"] = e.Secret
	recv.mu.Unlock()
	h.runDeliverer()
	if err := h.app.Store.AppendAudit(context.Background(), billing.AuditEvent{Event: billing.EventOperationFailed,
		Org: "hookweb", Principal: "alice", ConfirmationID: "cfm_web", Outcome: "failed", Reason: "payment_failed"}); err != nil {
		t.Fatal(err)
	}
	recv.waitFor("/std", "change.failed", 10*time.Second)

	b := newBrowser(t)
	b.do(chromedp.Navigate(h.url + "/"))
	b.signIn(h.admin("hookweb", "wendy"))
	ctx, cancel := context.WithTimeout(b.ctx, browserWait)
	defer cancel()
	expr := `(() => { const t = document.getElementById("webhook-deliveries").textContent;
		return !document.getElementById("webhooks").hidden && t.includes("change.failed") && t.includes("delivered") &&
			t.includes("HTTP 200") && t.includes(` + jsString(recv.URL+"/std") + `); })()`
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr)); err != nil {
		t.Fatalf("the dashboard does not show the delivery (it shows %q): %v", b.text("webhook-deliveries"), err)
	}
	b.wantNoScriptErrors()
}
