package webhooks

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

type links struct{}

func (links) ApprovalURL(id string) string { return "https://billing.example/approvals/" + id }
func (links) VerifyURL(id string) string   { return "https://billing.example/verify/" + id }

const summary = "Upgrade Acme <Corp> & Co from Pro to Scale: $30.00 due now. Test mode: no real money moves."

func approvalRequested(expires time.Time) Delivery {
	data, _ := json.Marshal(map[string]any{"confirmation_id": "cfm_1", "summary": summary, "requester": "alice",
		"agent": "claude-desktop", "actor": "alice", "approvals_given": 0, "approvals_required": 2,
		"expires_at": expires.UTC().Format(time.RFC3339), "operation": "upgrade_plan"})
	return Delivery{ID: 1, EventID: "evt_1", Type: ApprovalRequested, Org: "acme", CreatedAt: time.Unix(1700000000, 0),
		Data: data, Format: FormatSlack}
}

// TestStandardBody: the contract's shape, the approval link added, never a
// token.
func TestStandardBody(t *testing.T) {
	d := approvalRequested(time.Now().Add(10 * time.Minute))
	body, err := standardBody(d, links{})
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		ID      string         `json:"id"`
		Type    string         `json:"type"`
		Created int64          `json:"created"`
		Org     string         `json:"org"`
		Data    map[string]any `json:"data"`
	}
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	if got.ID != "evt_1" || got.Type != ApprovalRequested || got.Created != 1700000000 || got.Org != "acme" {
		t.Fatalf("envelope %+v", got)
	}
	for k, want := range map[string]any{"confirmation_id": "cfm_1", "summary": summary, "requester": "alice",
		"agent": "claude-desktop", "approvals_given": 0.0, "approvals_required": 2.0,
		"approval_url": "https://billing.example/approvals/cfm_1"} {
		if got.Data[k] != want {
			t.Errorf("data.%s = %v, want %v", k, got.Data[k], want)
		}
	}
	if got.Data["expires_at"] == nil || strings.Contains(string(body), "token") {
		t.Fatalf("body %s", body)
	}
}

// TestSlackBody: an approver can act from Slack: the summary verbatim (as
// Slack shows it: &, <, > escaped), who asks through which agent, the
// countdown and a button to the approval page.
func TestSlackBody(t *testing.T) {
	now := time.Now()
	d := approvalRequested(now.Add(10*time.Minute + 30*time.Second))
	body, err := slackBody(d, links{}, now)
	if err != nil {
		t.Fatal(err)
	}
	var msg struct {
		Text   string `json:"text"`
		Blocks []struct {
			Type string `json:"type"`
			Text struct {
				Type string `json:"type"`
				Text string `json:"text"`
			} `json:"text"`
			Elements []struct {
				URL  string                `json:"url"`
				Text struct{ Text string } `json:"text"`
			} `json:"elements"`
		} `json:"blocks"`
	}
	if err := json.Unmarshal(body, &msg); err != nil {
		t.Fatal(err)
	}
	escaped := "Upgrade Acme &lt;Corp&gt; &amp; Co from Pro to Scale: $30.00 due now. Test mode: no real money moves."
	if !strings.Contains(msg.Text, escaped) {
		t.Errorf("text %q lacks the summary", msg.Text)
	}
	var all []string
	button := ""
	for _, b := range msg.Blocks {
		if b.Text.Text != "" && b.Text.Type != "mrkdwn" {
			t.Errorf("block text type %q", b.Text.Type)
		}
		all = append(all, b.Text.Text)
		for _, e := range b.Elements {
			button = e.URL
		}
	}
	text := strings.Join(all, "\n")
	for _, want := range []string{"Approval needed", "> " + escaped, "Asked by *alice* through agent *claude-desktop*",
		"Approvals: 0 of 2", "in 10 minutes", "<!date^"} {
		if !strings.Contains(text, want) {
			t.Errorf("blocks lack %q:\n%s", want, text)
		}
	}
	if button != "https://billing.example/approvals/cfm_1" {
		t.Errorf("button %q", button)
	}
	if strings.Contains(string(body), "<Corp>") {
		t.Error("an unescaped < reached Slack")
	}
}

// TestListedHidesCredentials: lists never show a credential: a Slack
// incoming-webhook URL (format slack, or Slack's host) is its origin and
// /services/…, a query string is ?…, and the secret is gone.
func TestListedHidesCredentials(t *testing.T) {
	for _, c := range []struct{ url, format, want string }{
		{"https://hooks.slack.com/services/T000/B000/XXXX", FormatSlack, "https://hooks.slack.com/services/…"},
		{"https://hooks.slack.com/services/T000/B000/XXXX", FormatStandard, "https://hooks.slack.com/services/…"},
		{"https://HOOKS.SLACK.COM/services/T000/B000/XXXX", FormatStandard, "https://HOOKS.SLACK.COM/services/…"},
		{"https://proxy.example:8443/slack/T0/B0/X", FormatSlack, "https://proxy.example:8443/…"},
		{"https://hooks.example.com/billing?token=abc", FormatStandard, "https://hooks.example.com/billing?…"},
		{"https://hooks.example.com/billing#frag", FormatStandard, "https://hooks.example.com/billing"},
		{"https://hooks.example.com/billing", FormatStandard, "https://hooks.example.com/billing"},
	} {
		got := Endpoint{URL: c.url, Format: c.format, Secret: "whsec_x"}.Listed()
		if got.URL != c.want || got.Secret != "" {
			t.Errorf("Listed(%s, %s) = %q (secret %q), want %q and no secret", c.url, c.format, got.URL, got.Secret, c.want)
		}
	}
}

// TestListedHidesSlackURLOnEveryHostSpelling: a standard-format endpoint
// on Slack's host carries the same credential in its path however the
// host is spelled: any case, the fully qualified form with its trailing
// dot, GovSlack's host, another host of Slack's. Each is listed as its
// origin and /services/…; a host that merely looks like Slack's is not.
func TestListedHidesSlackURLOnEveryHostSpelling(t *testing.T) {
	for _, c := range []struct{ url, want string }{
		{"https://hooks.slack.com./services/T000/B000/XXXXSECRET", "https://hooks.slack.com./services/…"},
		{"https://HOOKS.SLACK.COM./services/T000/B000/XXXXSECRET", "https://HOOKS.SLACK.COM./services/…"},
		{"https://hooks.slack-gov.com/services/T000/B000/XXXXSECRET", "https://hooks.slack-gov.com/services/…"},
		{"https://Hooks.Slack-Gov.Com./services/T000/B000/XXXXSECRET", "https://Hooks.Slack-Gov.Com./services/…"},
		{"https://hooks.slack.com:443/services/T000/B000/XXXXSECRET", "https://hooks.slack.com:443/services/…"},
		{"https://other.slack.com/workflows/XXXXSECRET", "https://other.slack.com/…"},
		{"https://hooks.notslack.com/billing", "https://hooks.notslack.com/billing"},
		{"https://hooks.slack.com.example/billing", "https://hooks.slack.com.example/billing"},
	} {
		got := Endpoint{URL: c.url, Format: FormatStandard}.Listed()
		if got.URL != c.want {
			t.Errorf("Listed(%s, standard) = %q, want %q", c.url, got.URL, c.want)
		}
	}
}
