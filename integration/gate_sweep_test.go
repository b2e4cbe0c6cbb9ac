package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/auth"
	"github.com/billingd/billingd/internal/devissuer"
)

// The gate sweep (issue 37): the rule "no change reaches Stripe unless a
// person consented in a way the policy in force accepted", tried on every
// route an agent's token can reach, REST and MCP, with every scope and
// every kind of client.
//
// Each case is a fresh org whose policy holds agents' changes for a
// person's approval, with a person's notification endpoint, a person's
// mandate and a change of the agent's waiting for approval. The caller
// tries the route with bodies meant to loosen the gate (an empty policy,
// allow rules, its own endpoint, deleting the person's, a mandate,
// approving the waiting change); then agents try to make a plan change end
// to end, once under that policy and once under one a mandate can satisfy
// (agents need only confirm), trying first calls only, so that a mandate
// an agent granted itself would execute at once. The oracle:
//
//   - a write at Stripe is a failure unless a person's call of this case
//     loosened the gate (the test consented through the person);
//   - around every try that is not a person's, the org's gate state
//     (gateState: the policy as GET /api/billing/policy shows it, the
//     webhook endpoints with their secrets and rotation, the mandates,
//     each confirmation's status, approval and approvers, and the audit
//     log without its OPERATION_DENIED rows) must be unchanged, but for
//     what taking power away removes (a cancelled confirmation, a revoked
//     mandate) and what asking for a change adds (a confirmation nobody
//     approved, its token's events): a route that writes and then answers
//     403 fails here even when Stripe never hears of it;
//   - an agent's try at a route that loosens must answer 403
//     operation_denied (insufficient_scope only when its token lacks the
//     route's scope);
//   - a person's try must succeed, so the sweep cannot pass by refusing
//     everyone.
//
// The callers are every kind the contract names (§4): agents (a client the
// org lists in agent_clients, a client nobody listed anywhere, a token
// without a client, a PERSON_CLIENTS client the org names in
// agent_clients, any MCP call) and people (a PERSON_CLIENTS client,
// billingd's signed-in pages).
//
// The routes come from the router (App.Routes) and the MCP server's tool
// list: a route or tool this file does not classify fails the sweep; only
// Echo's own not-found routes are left out.

// gateKind is what a route can do to the gate.
type gateKind string

const (
	noToken   gateKind = "no bearer token"    // health, metadata, Stripe's signed webhooks, sign-in
	reads     gateKind = "reads"              // changes nothing
	takesAway gateKind = "takes power away"   // cancel, revoke: an agent may
	loosens   gateKind = "loosens"            // gives power: a person's only
	changes   gateKind = "changes the plan"   // the handshake
	pageOnly  gateKind = "page, session only" // billingd's pages: a bearer token is not a session
)

// sweptRoute is a route's class, the scope its token needs and the bodies
// the sweep tries on it.
type sweptRoute struct {
	kind   gateKind
	scope  string
	bodies []string
}

var (
	loosePolicies = []string{`{"rules":[]}`, `{"rules":[{"name":"anything goes","action":"allow"}]}`,
		`{"agent_clients":[],"rules":[{"name":"agents go free","caller":"agent","action":"allow"}]}`}
	agentEndpoint = []string{`{"url":"http://127.0.0.1:9/agent","events":["approval.requested","approval.granted"]}`,
		`{"url":"http://127.0.0.1:9/services/T1/B1/agent","events":["approval.requested"],"format":"slack"}`}
	noBody = []string{""}
)

// sweptRoutes classifies every REST route by "METHOD path" as the router
// names it.
var sweptRoutes = map[string]sweptRoute{
	"GET /healthz": {kind: noToken},
	"GET /readyz":  {kind: noToken},
	"GET /.well-known/oauth-protected-resource":     {kind: noToken},
	"GET /.well-known/oauth-protected-resource/mcp": {kind: noToken},
	"GET /.well-known/jwks.json":                    {kind: noToken},
	"GET /openapi.yaml":                             {kind: noToken},
	"POST /webhooks/stripe":                         {kind: noToken, bodies: []string{`{"type":"customer.subscription.updated"}`}},
	"GET /auth/login":                               {kind: noToken},
	"GET /auth/callback":                            {kind: noToken},
	"POST /auth/logout":                             {kind: noToken},
	"GET /auth/session":                             {kind: noToken},

	"GET /":                     {kind: pageOnly},
	"GET /approvals/:id":        {kind: pageOnly},
	"GET /assets/:name":         {kind: pageOnly},
	"GET /mandates":             {kind: pageOnly},
	"POST /mandates":            {kind: pageOnly, bodies: []string{"action=grant&client=test-agent&operations=upgrade_plan&to_plans=scale&max_amount_due=1000&budget=1000&max_changes=5&days=30"}},
	"POST /mandates/:id/revoke": {kind: pageOnly},
	"GET /verify/:id":           {kind: pageOnly},
	"POST /verify/:id":          {kind: pageOnly, bodies: []string{"decision=confirm", "decision=approve"}},

	"GET /api/billing/plans":                     {kind: reads, scope: auth.ScopeRead},
	"GET /api/billing/subscription":              {kind: reads, scope: auth.ScopeRead},
	"GET /api/billing/confirmations":             {kind: reads, scope: auth.ScopeRead},
	"GET /api/billing/confirmations/:id/receipt": {kind: reads, scope: auth.ScopeRead},
	"GET /api/billing/mandates":                  {kind: reads, scope: auth.ScopeRead},
	"GET /api/billing/audit":                     {kind: reads, scope: auth.ScopeAdmin},
	"GET /api/billing/audit/export":              {kind: reads, scope: auth.ScopeAdmin},
	"GET /api/billing/policy":                    {kind: reads, scope: auth.ScopeAdmin},
	"GET /api/billing/webhook-endpoints":         {kind: reads, scope: auth.ScopeAdmin},

	"POST /api/billing/confirmations/:id/cancel": {kind: takesAway, scope: auth.ScopeWrite},
	"DELETE /api/billing/mandates/:id":           {kind: takesAway, scope: auth.ScopeWrite},

	"POST /api/billing/upgrade":   {kind: changes, scope: auth.ScopeWrite, bodies: []string{`{"to":"scale"}`}},
	"POST /api/billing/downgrade": {kind: changes, scope: auth.ScopeWrite, bodies: []string{`{"to":"free"}`}},
	"POST /api/billing/seats":     {kind: changes, scope: auth.ScopeWrite, bodies: []string{`{"quantity":2}`}},
	"POST /api/billing/cancel":    {kind: changes, scope: auth.ScopeWrite, bodies: []string{`{"at":"now"}`, `{"at":"period_end"}`}},
	"POST /api/billing/resume":    {kind: changes, scope: auth.ScopeWrite, bodies: []string{`{}`}},

	"PUT /api/billing/policy":                               {kind: loosens, scope: auth.ScopeAdmin, bodies: loosePolicies},
	"POST /api/billing/confirmations/:id/approve":           {kind: loosens, scope: auth.ScopeAdmin, bodies: noBody},
	"POST /api/billing/confirmations/:id/reject":            {kind: loosens, scope: auth.ScopeAdmin, bodies: noBody},
	"POST /api/billing/mandates":                            {kind: loosens, scope: auth.ScopeWrite, bodies: []string{mandateFor("test-agent")}},
	"POST /api/billing/webhook-endpoints":                   {kind: loosens, scope: auth.ScopeAdmin, bodies: agentEndpoint},
	"DELETE /api/billing/webhook-endpoints/:id":             {kind: loosens, scope: auth.ScopeAdmin, bodies: noBody},
	"POST /api/billing/webhook-endpoints/:id/rotate-secret": {kind: loosens, scope: auth.ScopeAdmin, bodies: noBody},
}

// sweptTools classifies every MCP tool; over MCP every caller is an agent.
var sweptTools = map[string]gateKind{
	"list_plans":          reads,
	"get_subscription":    reads,
	"cancel_confirmation": takesAway,
	"upgrade_plan":        changes,
	"downgrade_plan":      changes,
	"change_seats":        changes,
	"cancel_subscription": changes,
	"resume_subscription": changes,
	"confirm_plan_change": changes,
}

// mandateFor is a generous grant for client. The route table holding it is
// made when the test binary starts, and CI's integration run lasts over an
// hour: it expires in 30 days, not one hour.
func mandateFor(client string) string {
	return fmt.Sprintf(`{"client":%q,"operations":["upgrade_plan","downgrade_plan"],"to_plans":["free","pro","scale"],`+
		`"max_amount_due_cents":1000000,"budget_cents":10000000,"max_changes":100,"expires_at":%q}`,
		client, time.Now().Add(30*24*time.Hour).UTC().Format(time.RFC3339))
}

// scopeSets are the tokens' scopes the sweep tries.
var scopeSets = [][]string{
	{auth.ScopeRead}, {auth.ScopeWrite}, {auth.ScopeAdmin},
	{auth.ScopeRead, auth.ScopeWrite}, {auth.ScopeRead, auth.ScopeWrite, auth.ScopeAdmin},
}

// gateCase is one org set up for one try: a person's endpoint and mandate,
// and a change of the agent bot waiting for approval.
type gateCase struct {
	h        *harness
	org, sub string
	hook     string // the person's endpoint
	mandate  string // the person's mandate for test-agent
	waiting  proposal
	// consented: a person's call of this case loosened the gate.
	consented bool
	// page and csrf: the case's person signed in on billingd's pages.
	page *visitor
	csrf string
	// agentClients: the clients the org's agent_clients names.
	agentClients []string
}

// on is h reporting to t (a subtest's), so that its helpers fail t.
func (h *harness) on(t *testing.T) *harness {
	c := *h
	c.t = t
	return &c
}

// newGateCase sets up org n. moreAgents are clients the org names in
// agent_clients besides test-agent, once the person set everything up
// (naming PERSON_CLIENTS' client there makes the harness's person an
// agent).
func (h *harness) newGateCase(t *testing.T, n int, moreAgents ...string) *gateCase {
	t.Helper()
	c := &gateCase{h: h, org: fmt.Sprintf("gate%d", n), agentClients: append([]string{"test-agent"}, moreAgents...)}
	c.sub = h.createOrg(c.org, "Gate", "pro").Subscription.StripeSubscriptionID
	h.setPolicy(c.org, agentsNeedApproval)
	c.hook = h.addEndpoint(c.org, map[string]any{"url": "http://127.0.0.1:9/services/T0/B0/people",
		"events": []string{"approval.requested"}, "format": "slack"}).ID
	// A mandate of the person's: an agent may revoke it; it never
	// overrides approve.
	c.mandate = h.grantMandate(c.org, "setup-person", generous()).ID
	c.waiting = h.proposeApproval(h.user(c.org, "bot"), "scale")
	if len(moreAgents) > 0 {
		h.setPolicy(c.org, c.policy("approve"))
	}
	return c
}

// policy is the case's policy with agents' changes at action.
func (c *gateCase) policy(action string) string {
	clients, _ := json.Marshal(c.agentClients)
	return fmt.Sprintf(`{"agent_clients":%s,"rules":[{"name":"agents need a human","caller":"agent","action":%q}]}`, clients, action)
}

// path fills a route's parameters with the case's objects.
func (c *gateCase) path(route string) string {
	id := c.waiting.ConfirmationID
	switch {
	case strings.Contains(route, "/webhook-endpoints/"):
		id = c.hook
	case strings.Contains(route, "/mandates/"):
		id = c.mandate
	}
	return strings.NewReplacer(":id", id, ":name", "dashboard.js").Replace(route)
}

// judge applies the oracle after a try: agents then try to make a change
// end to end (bot's waiting change, a new one of bot's, one of the
// caller's own when it is an agent that may write), and Stripe must have
// made nothing unless the test consented as a person.
func (c *gateCase) judge(t *testing.T, what string, agentToken string) {
	t.Helper()
	h := c.h
	bot := h.user(c.org, "bot")
	deliver(h.url, bearerRequest(h, "POST", "/api/billing/upgrade", bot, fmt.Sprintf(`{"to":"scale","confirm_token":%q}`, c.waiting.ConfirmToken)))
	for _, tok := range []string{bot, agentToken} {
		if tok == "" {
			continue
		}
		for _, to := range []string{"scale", "free"} {
			op := map[string]string{"scale": "upgrade", "free": "downgrade"}[to]
			r := h.roundTrip(bearerRequest(h, "POST", "/api/billing/"+op, tok, fmt.Sprintf(`{"to":%q}`, to)))
			var p proposal
			if r.Status == http.StatusAccepted && r.decodeErr(&p) == nil && p.ConfirmToken != "" {
				deliver(h.url, bearerRequest(h, "POST", "/api/billing/"+op, tok, fmt.Sprintf(`{"to":%q,"confirm_token":%q}`, to, p.ConfirmToken)))
			}
		}
	}
	if made := h.changesAtStripe(c.sub); len(made) > 0 && !c.consented {
		t.Errorf("%s: Stripe made %d change(s) (%s first) without a person's consent", what, len(made), made[0].Endpoint)
		return
	}
	c.judgeUnderMandates(t, what, agentToken)
}

// judgeUnderMandates judges again under a policy that a mandate can
// satisfy (agents need only confirm, not approve): the test, as the
// operator, puts it in place in the database (the org's person may be
// named an agent), and agents make first calls only, so that nothing
// reaches Stripe but through a mandate. The person's own mandate is for
// another principal; a mandate an agent granted (test-agent acting for the
// sweep's caller, as the sweep's grant asks) would execute at once.
func (c *gateCase) judgeUnderMandates(t *testing.T, what string, agentToken string) {
	t.Helper()
	h := c.h
	if _, err := h.db.Pool.Exec(context.Background(), `UPDATE org_policies SET policy = $2, updated_by = 'gate sweep' WHERE org = $1`,
		c.org, c.policy("confirm")); err != nil {
		t.Fatal(err)
	}
	granted := h.tokenOf("test-agent", c.org, "caller", auth.ScopeRead, auth.ScopeWrite)
	for _, tok := range []string{h.user(c.org, "bot"), granted, agentToken} {
		if tok == "" {
			continue
		}
		for _, op := range []string{"upgrade", "downgrade"} {
			to := map[string]string{"upgrade": "scale", "downgrade": "free"}[op]
			deliver(h.url, bearerRequest(h, "POST", "/api/billing/"+op, tok, fmt.Sprintf(`{"to":%q}`, to)))
		}
	}
	if made := h.changesAtStripe(c.sub); len(made) > 0 && !c.consented {
		t.Errorf("%s: under a policy a mandate satisfies, Stripe made %d change(s) (%s first) without a person's consent",
			what, len(made), made[0].Endpoint)
	}
}

// gateState is what the org's gate is made of, item by item: "policy",
// "endpoint <id>", "mandate <id>", "confirmation <id>", "audit <id>" (the
// audit log without its OPERATION_DENIED rows, which a refusal adds).
type gateState map[string]string

// state reads the org's gate state: the policy as the API shows it, the
// rest from the database (every column of an endpoint, its secrets as
// hashes; every column of a mandate, "revoked" when it is).
func (c *gateCase) state(t *testing.T) gateState {
	t.Helper()
	h := c.h
	s := gateState{}
	r := h.roundTrip(bearerRequest(h, "GET", "/api/billing/policy", h.tokenOf("snapshot", c.org, "snapshot", auth.ScopeAdmin), ""))
	if r.Status != http.StatusOK {
		t.Fatalf("read the policy: %d %s", r.Status, r.Body)
	}
	s["policy"] = string(r.Body)
	for _, q := range []struct{ kind, sql string }{
		{"endpoint", `SELECT id, (to_jsonb(e) - 'secret' - 'previous_secret' || jsonb_build_object('secret_md5', md5(secret),
			'previous_secret_md5', md5(coalesce(previous_secret, ''))))::text FROM webhook_endpoints e WHERE org = $1`},
		{"mandate", `SELECT id, (to_jsonb(m) - 'revoked_at' - 'revoked_by')::text ||
			CASE WHEN revoked_at IS NULL THEN '' ELSE ' revoked' END FROM mandates m WHERE org = $1`},
		{"confirmation", `SELECT id, format('status %s, approval %s, approvers %s, approver %s, approvals_required %s',
			status, coalesce(approval, 'none'), approvers, coalesce(approver, ''), approvals_required) FROM confirmations WHERE org = $1`},
		{"audit", `SELECT id::text, format('%s by %s (client %s): operation %s, confirmation %s, reason %s',
			event, principal, client, operation, confirmation_id, reason) FROM audit_events WHERE org = $1 AND event <> 'OPERATION_DENIED'`},
	} {
		rows, err := h.db.Pool.Query(context.Background(), q.sql, c.org)
		if err != nil {
			t.Fatalf("read the %ss: %v", q.kind, err)
		}
		for rows.Next() {
			var id, state string
			if err := rows.Scan(&id, &state); err != nil {
				t.Fatal(err)
			}
			s[q.kind+" "+id] = state
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// wantGateKept requires the gate state after a try of kind that is not a
// person's to be before's, but for what taking power away removes (a
// pending confirmation cancelled, a mandate revoked, and their audit
// events) and what asking for a change adds (a confirmation nobody
// approved, and its token's events).
func wantGateKept(t *testing.T, what string, kind gateKind, before, after gateState) {
	t.Helper()
	for item, was := range before {
		now, ok := after[item]
		switch {
		case !ok:
			t.Errorf("%s: %s is gone (was %s)", what, item, was)
		case now == was:
		case kind == takesAway && takenAway(item, was, now):
		default:
			t.Errorf("%s: %s changed:\n  %s\nwas\n  %s", what, item, now, was)
		}
	}
	for item, now := range after {
		if _, ok := before[item]; !ok && !mayAppear(kind, item, now) {
			t.Errorf("%s: %s appeared: %s", what, item, now)
		}
	}
}

// takenAway reports whether was → now only takes power away.
func takenAway(item, was, now string) bool {
	switch kind, _, _ := strings.Cut(item, " "); kind {
	case "confirmation":
		return strings.HasPrefix(was, "status pending,") && now == strings.Replace(was, "status pending,", "status cancelled,", 1)
	case "mandate":
		return now == was+" revoked"
	}
	return false
}

// mayAppear reports whether an item new after a try of kind is allowed.
func mayAppear(kind gateKind, item, now string) bool {
	allowed := map[gateKind][]string{
		changes:   {billing.EventTokenIssued, billing.EventTokenRejected, billing.EventTokenValidated, billing.EventTokenRevoked},
		takesAway: {billing.EventTokenRevoked, billing.EventMandateRevoked},
	}[kind]
	switch what, _, _ := strings.Cut(item, " "); what {
	case "audit":
		event, _, _ := strings.Cut(now, " ")
		return slices.Contains(allowed, event)
	case "confirmation": // a change asked for, which nobody approved
		return kind == changes && !strings.Contains(now, "approval granted") && strings.Contains(now, "approvers {}")
	}
	return false
}

func bearerRequest(h *harness, method, path, token, body string) *http.Request {
	h.t.Helper()
	req, err := http.NewRequest(method, h.url+path, strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
		if !strings.HasPrefix(body, "{") {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
	}
	return req
}

// restCaller is a kind of REST client: an agent (test-agent, which the
// org names in agent_clients; a client nobody listed anywhere; a token
// without a client; a PERSON_CLIENTS client the org names in
// agent_clients), a person (a PERSON_CLIENTS client, or billingd's
// signed-in pages).
type restCaller struct {
	name   string
	person bool
	pages  bool
	scopes []string
	// moreAgents: clients the case's org names in agent_clients besides
	// test-agent.
	moreAgents []string
	send       func(c *gateCase, method, path, body string) response
	token      func(c *gateCase) string // nil for the pages
}

func hasScope(scopes []string, scope string) bool {
	return scope == "" || slices.Contains(scopes, scope)
}

// restCallers are the kinds of client the sweep tries, with each scope set.
func restCallers() []restCaller {
	var out []restCaller
	for _, scopes := range scopeSets {
		label := strings.Join(scopes, "+")
		for _, who := range []struct {
			name, client string
			person       bool
			moreAgents   []string
		}{
			{"agent", "test-agent", false, nil},
			{"agent without a client", "", false, nil},
			// In neither PERSON_CLIENTS nor agent_clients: an agent
			// because nobody vouched for it, not because the org said so.
			{"unlisted client", "stranger-bot", false, nil},
			// agent_clients may name more agents, never make a person.
			{"person client the org names an agent", personClient, false, []string{personClient}},
			{"person client", personClient, true, nil},
		} {
			if !who.person && who.client != "test-agent" && len(scopes) < 3 {
				continue // one scope set (all three) is enough for the other kinds of agent
			}
			tok := func(c *gateCase) string {
				return mint(c.h.t, c.h, devissuer.Claims{Subject: "caller", Org: c.org, Client: who.client, Scopes: scopes,
					Audience: []string{c.h.url}, Extra: map[string]any{"auth_time": time.Now().Unix()}})
			}
			out = append(out, restCaller{name: who.name + " " + label, person: who.person, scopes: scopes, token: tok, moreAgents: who.moreAgents,
				send: func(c *gateCase, method, path, body string) response {
					return c.h.roundTrip(bearerRequest(c.h, method, path, tok(c), body))
				}})
		}
	}
	all := []string{auth.ScopeRead, auth.ScopeWrite, auth.ScopeAdmin}
	return append(out, restCaller{name: "pages person", person: true, pages: true, scopes: all, send: (*gateCase).onPages})
}

// onPages sends a request as the case's person signed in on billingd's
// pages (the session cookie and its CSRF token, as the dashboard does).
func (c *gateCase) onPages(method, path, body string) response {
	h := c.h
	if c.page == nil {
		h.signInPeople(c.org, []string{"pageperson"})
		c.page, c.csrf = h.signInOnPages("pageperson")
	}
	req := bearerRequest(h, method, path, "", body)
	req.Header.Set("X-CSRF-Token", c.csrf)
	resp, err := c.page.client.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	r, err := readResponse(resp)
	if err != nil {
		h.t.Fatal(err)
	}
	return r
}

// TestGateSweep sweeps every REST route and MCP tool (see above).
func TestGateSweep(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withEnv("WEBHOOK_ALLOW_PRIVATE_NETWORKS", "true"), withEnv("CONFIRM_TTL", "5m"),
		// The pages' person signs in once per case.
		withEnv("RATE_LIMIT_SIGN_INS", "0"), withEnv("RATE_LIMIT_SIGN_INS_TOTAL", "0"))
	routes := h.routesToSweep(t)
	n := 0
	for _, route := range routes {
		sr := sweptRoutes[route]
		method, path, _ := strings.Cut(route, " ")
		for _, caller := range restCallers() {
			if caller.pages && sr.kind != loosens {
				continue // the pages show that the sweep tells a person's loosening apart
			}
			t.Run(route+" as "+caller.name, func(t *testing.T) {
				n++
				c := h.on(t).newGateCase(t, n, caller.moreAgents...)
				var before gateState
				if !caller.person {
					before = c.state(t)
				}
				for _, body := range bodiesOf(sr) {
					r := caller.send(c, method, c.path(path), body)
					c.checkAnswer(t, route, sr, caller, r)
				}
				if !caller.person {
					wantGateKept(t, route+" as "+caller.name, sr.kind, before, c.state(t))
				}
				agent := ""
				if !caller.person && hasScope(caller.scopes, auth.ScopeWrite) {
					agent = caller.token(c)
				}
				c.judge(t, route+" as "+caller.name, agent)
			})
		}
	}
	h.sweepMCP(t, &n)
}

// bodiesOf is what the sweep sends to the route: its bodies, or none.
func bodiesOf(sr sweptRoute) []string {
	if len(sr.bodies) == 0 {
		return noBody
	}
	return sr.bodies
}

// checkAnswer holds the rules of answers: an agent's try to loosen is 403
// operation_denied (insufficient_scope without the route's scope); a
// person's succeeds, and is the test's consent.
func (c *gateCase) checkAnswer(t *testing.T, route string, sr sweptRoute, caller restCaller, r response) {
	t.Helper()
	if sr.kind != loosens {
		return
	}
	switch {
	case !hasScope(caller.scopes, sr.scope):
		if r.Status != http.StatusForbidden || r.errorCode(t) != "insufficient_scope" {
			t.Errorf("%s as %s without %s: %d %s, want 403 insufficient_scope", route, caller.name, sr.scope, r.Status, r.Body)
		}
	case !caller.person:
		if r.Status != http.StatusForbidden || r.errorCode(t) != "operation_denied" || !strings.Contains(string(r.Body), "a person must") {
			t.Errorf("%s as %s: %d %s, want 403 operation_denied saying a person must", route, caller.name, r.Status, r.Body)
		}
	case r.Status >= 300:
		t.Errorf("%s as %s (a person): %d %s, want success", route, caller.name, r.Status, r.Body)
	default:
		c.consented = true
	}
}

// routesToSweep lists the router's routes and requires each classified
// (and each classification to name a route that exists). Only Echo's own
// not-found routes (a group's "/*" under the RouteNotFound method) are
// left out; every other route, a wildcard of any method included, must be
// classified.
func (h *harness) routesToSweep(t *testing.T) []string {
	t.Helper()
	seen := map[string]bool{}
	for _, r := range h.app.Routes() {
		if r.Method == echo.RouteNotFound {
			continue // Echo's own not-found routes of groups
		}
		seen[r.Method+" "+r.Path] = true
	}
	var routes []string
	for route := range seen {
		if _, ok := sweptRoutes[route]; !ok {
			t.Errorf("route %s is not classified by the gate sweep: add it to sweptRoutes", route)
			continue
		}
		routes = append(routes, route)
	}
	for route := range sweptRoutes {
		if !seen[route] {
			t.Errorf("sweptRoutes names %s, which the router does not serve", route)
		}
	}
	slices.Sort(routes)
	return routes
}

// sweepMCP tries every MCP tool with every scope set, as an agent client
// and as a PERSON_CLIENTS client (over MCP, an agent too).
func (h *harness) sweepMCP(t *testing.T, n *int) {
	t.Helper()
	lister := mcpConnect(t, h.url, h.mcpToken("nobody", "lister", "mcp-agent", auth.ScopeRead), "")
	tools, err := lister.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range tools.Tools {
		if _, ok := sweptTools[tool.Name]; !ok {
			t.Errorf("MCP tool %s is not classified by the gate sweep: add it to sweptTools", tool.Name)
		}
	}
	for _, tool := range tools.Tools {
		for _, scopes := range scopeSets {
			for _, client := range []string{"mcp-agent", personClient} {
				name := fmt.Sprintf("mcp %s as %s %s", tool.Name, client, strings.Join(scopes, "+"))
				t.Run(name, func(t *testing.T) {
					*n++
					h := h.on(t)
					c := h.newGateCase(t, *n)
					before := c.state(t)
					cs := mcpConnect(t, h.url, h.mcpToken(c.org, "caller", client, scopes...), "")
					c.tryTool(cs, tool)
					wantGateKept(t, name, sweptTools[tool.Name], before, c.state(t))
					c.judge(t, name, "")
				})
			}
		}
	}
}

// tryTool calls tool with arguments that would change the plan or act on
// the waiting change, both calls of the handshake when it answers a token.
func (c *gateCase) tryTool(cs *sdk.ClientSession, tool *sdk.Tool) {
	args := map[string]map[string]any{
		"upgrade_plan":        {"to": "scale"},
		"downgrade_plan":      {"to": "free"},
		"change_seats":        {"quantity": 2},
		"cancel_subscription": {"at": "now"},
		"resume_subscription": {},
		"cancel_confirmation": {"confirmation_id": c.waiting.ConfirmationID},
		"confirm_plan_change": {"confirmation_id": c.waiting.ConfirmationID, "confirm_token": c.waiting.ConfirmToken},
	}[tool.Name]
	res, err := callToolErr(cs, tool.Name, args)
	if err != nil || res.IsError || args["confirmation_id"] != nil { // a first call's token, if any, is sent back
		return
	}
	var p proposal
	if data, _ := res.StructuredContent.(map[string]any); data != nil {
		p.ConfirmToken, _ = data["confirm_token"].(string)
	}
	if p.ConfirmToken != "" {
		args["confirm_token"] = p.ConfirmToken
		_, _ = callToolErr(cs, tool.Name, args)
	}
}
