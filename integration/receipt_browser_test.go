package integration

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestReceiptInBrowser: after confirming a change in the dashboard the page
// shows its receipt next to the summary the person saw, with the signature
// checked in the page against /.well-known/jwks.json; the audit log links
// every executed change to its receipt; a receipt whose signature is broken
// is shown as not verified.
func TestReceiptInBrowser(t *testing.T) {
	h := newHarness(t)
	h.createOrg("web", "Web Shop", "pro")
	admin := h.admin("web", "wendy")
	b := newBrowser(t)

	b.do(chromedp.Navigate(h.url + "/"))
	b.signIn(admin)
	b.waitText("sub-plan", "Pro")
	b.do(chromedp.Click(chromedp.CSS(`button[data-focus-key="plan:scale"]`)))
	b.do(chromedp.WaitVisible(chromedp.ID("confirm-dialog")))
	summary := b.text("confirm-summary")
	b.do(chromedp.Click(chromedp.ID("confirm-ok")))
	b.waitText("sub-plan", "Scale")

	b.do(chromedp.WaitVisible(chromedp.ID("receipt")))
	if got := b.text("receipt-summary"); got != summary {
		t.Fatalf("receipt shows summary %q, the dialog showed %q", got, summary)
	}
	if sig := b.text("receipt-signature"); !strings.HasPrefix(sig, "Signature verified with billingd's published key ") {
		t.Fatalf("signature line %q", sig)
	}
	if check := b.text("receipt-summary-check"); !strings.HasPrefix(check, "The summary above is the one the receipt was signed for") {
		t.Fatalf("summary check %q", check)
	}
	claims := b.text("receipt-claims")
	for _, want := range []string{"wendy", "upgrade_plan: pro → scale", "Test mode: no real money moved", "billingd-cfm_",
		// How the person agreed: the dashboard is the person's own session.
		"How the person agreed", "person_session (the person's own signed-in call); human present: attested"} {
		if !strings.Contains(claims, want) {
			t.Errorf("receipt claims lack %q:\n%s", want, claims)
		}
	}
	b.screenshot(filepath.Join(screenshotDir(t), "receipt.png"))

	// From the audit log: the executed change links to the same receipt.
	b.do(chromedp.Evaluate[chromedp.Void](`document.getElementById("receipt").hidden = true; document.getElementById("receipt-signature").textContent = ""`))
	b.do(chromedp.Click(chromedp.CSS(`button[data-focus-key^="receipt:"]`)))
	b.do(chromedp.WaitVisible(chromedp.ID("receipt")))
	b.waitText("receipt-signature", b.text("receipt-signature"))
	if sig := b.text("receipt-signature"); !strings.HasPrefix(sig, "Signature verified") {
		t.Fatalf("signature line from the audit log %q", sig)
	}

	// The same check on a receipt with one signature byte changed fails.
	broken, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`(async () => {
		const jws = document.getElementById("receipt-jws").textContent;
		const sig = jws.split(".")[2];
		const flipped = jws.slice(0, jws.length - sig.length + 5) + (sig[5] === "A" ? "B" : "A") + sig.slice(6);
		const check = await checkReceipt(flipped);
		return check.verified ? "verified" : check.reason;
	})()`, chromedp.EvalAsValue, chromedp.EvalAwaitPromise))
	if err != nil || broken != "the signature does not match" {
		t.Fatalf("a broken receipt: %q, %v", broken, err)
	}
	b.wantNoScriptErrors()
}
