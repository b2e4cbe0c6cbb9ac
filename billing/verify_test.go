package billing_test

import (
	"context"
	"testing"
	"time"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/billing/billingtest"
)

// newVerifyFixture is the handshake under a policy whose every change needs
// the verify level (acrValues: VERIFY_ACR_VALUES).
func newVerifyFixture(t *testing.T, action billing.Action, acrValues ...string) handshakeFixture {
	t.Helper()
	acct := testAccount()
	acct.Policy = billing.Policy{AgentClients: []string{"bot"}, Rules: []billing.PolicyRule{{Name: "r", Action: action}}}
	store := billingtest.NewStore(dbNow, acct)
	provider := &billingtest.Provider{Preview: billing.Preview{AmountDueNowCents: 1742, ProrationCents: 1742, Currency: "usd"}, PeriodEnd: periodEnd,
		ReadState: billingtest.StateOf(testAccount())}
	svc, err := billing.NewService(billing.Config{Store: store, Payments: provider, Catalog: testCatalog(t, billing.DefaultPlans()),
		TokenTTL: time.Minute, PublicBaseURL: "https://billing.example", VerifyACRValues: acrValues,
		PersonClients: []string{"console"}})
	if err != nil {
		t.Fatal(err)
	}
	return handshakeFixture{svc: svc, store: store, provider: provider}
}

// TestVerifyStepUp: the second call executes only with the requester's
// authentication at or after the confirmation (RFC 9470); otherwise
// insufficient_user_authentication with the verification page.
func TestVerifyStepUp(t *testing.T) {
	f := newVerifyFixture(t, billing.ActionVerify)
	agent := billing.Caller{Org: "org_vb", Principal: "vera", Client: "bot"}
	p := f.propose(t, agent, billing.OpUpgrade, "scale")
	if !p.VerificationRequired || p.VerifyURL != "https://billing.example/verify/"+p.ConfirmationID {
		t.Fatalf("proposal %+v", p)
	}
	for name, authTime := range map[string]time.Time{"no auth_time": {}, "stale": dbNow.Add(-time.Minute)} {
		stale := agent
		stale.AuthTime = authTime
		_, err := f.confirm(stale, billing.OpUpgrade, "scale", p.ConfirmToken)
		wantCode(t, err, billing.CodeInsufficientUserAuthentication)
		if st := billing.StepUpOf(err); st == nil || st.VerifyURL != p.VerifyURL {
			t.Fatalf("%s: step-up %+v", name, st)
		}
	}
	fresh := agent
	fresh.AuthTime, fresh.ACR = dbNow, "pwd"
	if _, err := f.confirm(fresh, billing.OpUpgrade, "scale", p.ConfirmToken); err != nil {
		t.Fatalf("fresh step-up: %v", err)
	}
	if v := f.confirmation(t, p.ConfirmationID).Verification; v == nil || v.Method != billing.VerifiedByStepUp || !v.AuthTime.Equal(dbNow) {
		t.Fatalf("verification %+v", v)
	}
}

// claimsSigner keeps the claims of the receipts it signs.
type claimsSigner struct{ signed []billing.ReceiptClaims }

func (c *claimsSigner) SignReceipt(claims billing.ReceiptClaims) (string, error) {
	c.signed = append(c.signed, claims)
	return "receipt", nil
}

func (c *claimsSigner) SignCheckpoint(billing.Checkpoint) (string, error) { return "checkpoint", nil }

// TestStepUpReceiptCarriesVerification: a change verified by the caller's
// step-up token has a receipt that says when, as one verified on the page
// does (contract §11's verified_at).
func TestStepUpReceiptCarriesVerification(t *testing.T) {
	acct := testAccount()
	acct.Policy = billing.Policy{AgentClients: []string{"bot"}, Rules: []billing.PolicyRule{{Name: "r", Action: billing.ActionVerify}}}
	store := billingtest.NewStore(dbNow, acct)
	provider := &billingtest.Provider{Preview: billing.Preview{AmountDueNowCents: 1742, ProrationCents: 1742, Currency: "usd"}, PeriodEnd: periodEnd,
		ReadState: billingtest.StateOf(testAccount())}
	signer := &claimsSigner{}
	svc, err := billing.NewService(billing.Config{Store: store, Payments: provider, Catalog: testCatalog(t, billing.DefaultPlans()),
		TokenTTL: time.Minute, PublicBaseURL: "https://billing.example", Receipts: signer})
	if err != nil {
		t.Fatal(err)
	}
	f := handshakeFixture{svc: svc, store: store, provider: provider}
	agent := billing.Caller{Org: "org_vb", Principal: "vera", Client: "bot", AuthTime: dbNow, ACR: "pwd"}
	p := f.propose(t, agent, billing.OpUpgrade, "scale")
	if _, err := f.confirm(agent, billing.OpUpgrade, "scale", p.ConfirmToken); err != nil {
		t.Fatalf("fresh step-up: %v", err)
	}
	v := f.confirmation(t, p.ConfirmationID).Verification
	if len(signer.signed) != 1 || v == nil {
		t.Fatalf("%d receipts signed, verification %+v", len(signer.signed), v)
	}
	if got := signer.signed[0].VerifiedAt; got == nil || !got.Equal(v.VerifiedAt) {
		t.Fatalf("receipt verified_at %v, want the recorded %v", got, v.VerifiedAt)
	}
}

// TestVerifyACR: with VERIFY_ACR_VALUES, a fresh authentication must also
// be of one of those classes.
func TestVerifyACR(t *testing.T) {
	f := newVerifyFixture(t, billing.ActionVerify, "urn:passkey")
	caller := billing.Caller{Org: "org_vb", Principal: "vera", AuthTime: dbNow, ACR: "urn:password"}
	p := f.propose(t, caller, billing.OpUpgrade, "scale")
	_, err := f.confirm(caller, billing.OpUpgrade, "scale", p.ConfirmToken)
	wantCode(t, err, billing.CodeInsufficientUserAuthentication)
	if st := billing.StepUpOf(err); len(st.ACRValues) != 1 || st.ACRValues[0] != "urn:passkey" {
		t.Fatalf("acr values %+v", st)
	}
	caller.ACR = "urn:passkey"
	if _, err := f.confirm(caller, billing.OpUpgrade, "scale", p.ConfirmToken); err != nil {
		t.Fatal(err)
	}
}

// TestVerifyPageRules: the page's checks: only the requester, signed in
// after the confirmation; confirming lets the agent's stale call execute;
// declining cancels.
func TestVerifyPageRules(t *testing.T) {
	ctx := context.Background()
	f := newVerifyFixture(t, billing.ActionVerify)
	agent := billing.Caller{Org: "org_vb", Principal: "vera", Client: "bot"}
	p := f.propose(t, agent, billing.OpUpgrade, "scale")
	fresh := billing.Authentication{AuthTime: dbNow}

	_, err := f.svc.VerificationView(ctx, billing.Person{Subject: "mallory", Org: "org_vb", Auth: fresh}, p.ConfirmationID)
	wantCode(t, err, billing.CodeOperationDenied)
	_, err = f.svc.VerificationView(ctx, billing.Person{Subject: "vera", Org: "other", Auth: fresh}, p.ConfirmationID)
	wantCode(t, err, billing.CodeNotFound)
	_, err = f.svc.Verify(ctx, billing.Person{Subject: "vera", Org: "org_vb", Auth: billing.Authentication{AuthTime: dbNow.Add(-time.Hour)}}, p.ConfirmationID, true)
	wantCode(t, err, billing.CodeInsufficientUserAuthentication)

	vera := billing.Person{Subject: "vera", Org: "org_vb", Auth: fresh}
	view, err := f.svc.VerificationView(ctx, vera, p.ConfirmationID)
	if err != nil || view.Summary != p.Summary {
		t.Fatalf("view %+v: %v", view, err)
	}
	if _, err := f.svc.Verify(ctx, vera, p.ConfirmationID, true); err != nil {
		t.Fatal(err)
	}
	if _, err := f.confirm(agent, billing.OpUpgrade, "scale", p.ConfirmToken); err != nil {
		t.Fatalf("the agent's call after the page: %v", err)
	}

	down := f.propose(t, agent, billing.OpDowngrade, "pro")
	if _, err := f.svc.Verify(ctx, vera, down.ConfirmationID, false); err != nil {
		t.Fatal(err)
	}
	_, err = f.confirm(agent, billing.OpDowngrade, "pro", down.ConfirmToken)
	wantCode(t, err, billing.CodeTokenInvalid)
}

// TestApproversArePeople: an approval by an agent (person.go) is refused:
// over MCP, from an agent client, from a client not in PERSON_CLIENTS or a
// token with no client. A person's (a PERSON_CLIENTS client, billingd's
// signed-in pages) is recorded with their auth_time and acr.
func TestApproversArePeople(t *testing.T) {
	ctx := context.Background()
	f := newVerifyFixture(t, billing.ActionApprove)
	p := f.propose(t, billing.Caller{Org: "org_vb", Principal: "vera", Client: "bot"}, billing.OpUpgrade, "scale")
	for name, approver := range map[string]billing.Caller{
		"over MCP":           {Org: "org_vb", Principal: "boss", Admin: true, Agent: true},
		"agent client":       {Org: "org_vb", Principal: "boss", Admin: true, Client: "bot"},
		"unlisted client":    {Org: "org_vb", Principal: "boss", Admin: true, Client: "demo-agent"},
		"no client":          {Org: "org_vb", Principal: "boss", Admin: true},
		"MCP, listed client": {Org: "org_vb", Principal: "boss", Admin: true, Client: "console", Agent: true},
		"the requester":      {Org: "org_vb", Principal: "vera", Admin: true, Client: "console"},
		"without the scope":  {Org: "org_vb", Principal: "boss", Client: "console"},
	} {
		if _, err := f.svc.Approve(ctx, approver, p.ConfirmationID); err == nil {
			t.Fatalf("%s: approved", name)
		}
	}
	boss := billing.Caller{Org: "org_vb", Principal: "boss", Admin: true, Client: "console", AuthTime: dbNow, ACR: "urn:passkey"}
	if _, err := f.svc.Approve(ctx, boss, p.ConfirmationID); err != nil {
		t.Fatal(err)
	}
	if c := f.confirmation(t, p.ConfirmationID); c.Approver != "boss" || !c.ApproverAuth.AuthTime.Equal(dbNow) || c.ApproverAuth.ACR != "urn:passkey" {
		t.Fatalf("approval recorded as %+v", c)
	}
	down := f.propose(t, billing.Caller{Org: "org_vb", Principal: "vera", Client: "bot"}, billing.OpDowngrade, "free")
	signedIn := billing.Caller{Org: "org_vb", Principal: "boss", Admin: true, Client: "billingd-pages", Session: true}
	if _, err := f.svc.Approve(ctx, signedIn, down.ConfirmationID); err != nil {
		t.Fatalf("approval on billingd's signed-in page: %v", err)
	}
}
