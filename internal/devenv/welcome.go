package devenv

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/template"
	"time"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/devissuer"
)

// TokenTTL is how long the printed tokens are valid: a working day, so that
// a token pasted into an agent's configuration lasts the session. They die
// with the session anyway: the issuer's key lives in memory.
const TokenTTL = 12 * time.Hour

// Scopes of the printed tokens (contract §4).
var (
	agentScopes = []string{"billing:read", "billing:write"}
	adminScopes = []string{"billing:read", "billing:write", "billing:admin"}
)

// welcome is what the welcome text shows.
type welcome struct {
	Account                   billing.Account
	BaseURL, Issuer, Dir      string
	Database, Stripe          string
	AgentToken, AdminToken    string
	Expires                   string
	ConfirmTTL                string
	AgentScopes, AdminScopes  string
	AgentClient, AgentSubject string
	AdminClient, AdminSubject string
	MCPOverHTTP, MCPOverStdio string
}

// PrintWelcome mints an agent and an admin token for acct's org and writes
// what billingd dev offers: the dashboard, curl commands, MCP client
// configurations.
func (e *Env) PrintWelcome(w io.Writer, acct billing.Account) error {
	agent, err := e.mint(AgentSubject, AgentClient, acct.Org.ID, agentScopes)
	if err != nil {
		return err
	}
	admin, err := e.mint(AdminSubject, DashboardClient, acct.Org.ID, adminScopes)
	if err != nil {
		return err
	}
	v := welcome{Account: acct, BaseURL: e.Config.PublicBaseURL, Issuer: e.Config.OAuthIssuer, Dir: e.stateDir,
		Database: e.Database, Stripe: e.Stripe, AgentToken: agent, AdminToken: admin,
		Expires: time.Now().Add(TokenTTL).UTC().Format("2006-01-02 15:04 MST"), ConfirmTTL: fmt.Sprintf("%ds", int(e.Config.ConfirmTTL.Seconds())),
		AgentScopes: strings.Join(agentScopes, " "), AdminScopes: strings.Join(adminScopes, " "),
		AgentClient: AgentClient, AgentSubject: AgentSubject, AdminClient: DashboardClient, AdminSubject: AdminSubject}
	if v.MCPOverHTTP, err = e.mcpOverHTTP(agent); err != nil {
		return err
	}
	if v.MCPOverStdio, err = e.mcpOverStdio(agent); err != nil {
		return err
	}
	return welcomeText.Execute(w, v)
}

// mint signs a token for the first accepted audience (PUBLIC_BASE_URL unless
// OAUTH_AUDIENCE says otherwise), which REST and /mcp both accept.
func (e *Env) mint(subject, client, org string, scopes []string) (string, error) {
	tok, err := e.Issuer.Mint(devissuer.Claims{Subject: subject, Client: client, Org: org, Scopes: scopes,
		Audience: e.Config.OAuthAudiences[:1], TTL: TokenTTL})
	if err != nil {
		return "", fmt.Errorf("mint the %s token: %w", subject, err)
	}
	return tok, nil
}

// mcpOverHTTP is an mcpServers entry for Streamable HTTP at /mcp.
func (e *Env) mcpOverHTTP(token string) (string, error) {
	return mcpServers(mcpHTTPServer{Type: "http", URL: e.Config.PublicBaseURL + "/mcp",
		Headers: map[string]string{"Authorization": "Bearer " + token}})
}

// mcpOverStdio is an mcpServers entry that starts this binary's mcp stdio, a
// bridge to this server's /mcp. Its environment is the two variables the
// bridge reads and nothing else: an agent that can read its own
// configuration must find no database URL and no Stripe key there
// (contract §2).
func (e *Env) mcpOverStdio(token string) (string, error) {
	bin, err := os.Executable()
	if err != nil {
		bin = "billingd"
	}
	env := map[string]string{
		"BILLINGD_URL":          e.Config.PublicBaseURL,
		"BILLINGD_ACCESS_TOKEN": token,
	}
	return mcpServers(mcpStdioServer{Command: bin, Args: []string{"mcp", "stdio"}, Env: env})
}

// The two kinds of mcpServers entry, fields in the order clients document.
type mcpHTTPServer struct {
	Type    string            `json:"type"`
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers"`
}

type mcpStdioServer struct {
	Command string            `json:"command"`
	Args    []string          `json:"args"`
	Env     map[string]string `json:"env"`
}

func mcpServers(server any) (string, error) {
	out, err := json.MarshalIndent(map[string]any{"mcpServers": map[string]any{"billingd": server}}, "", "  ")
	if err != nil {
		return "", fmt.Errorf("MCP client configuration: %w", err)
	}
	return string(out), nil
}

var welcomeText = template.Must(template.New("welcome").Parse(`
billingd dev is ready. DEVELOPMENT ONLY: its token issuer signs whatever it is asked to.

  Dashboard  {{.BaseURL}}/   (Sign in: the dev login page lets you pick demo-user or demo-admin;
                               pasting a token below works too, in billingd dev only)
  Demo org   {{.Account.Org.ID}} "{{.Account.Org.Name}}", on {{.Account.Subscription.Plan}}
  Database   {{.Database}}
  Stripe     {{.Stripe}}
  Issuer     {{.Issuer}} (development only)

Tokens for org {{.Account.Org.ID}}, valid for 12h (until {{.Expires}}):

  agent: client {{.AgentClient}} acting for {{.AgentSubject}}; {{.AgentScopes}}
         an agent, as every client not in PERSON_CLIENTS: its changes are agent_relayed
  {{.AgentToken}}

  admin: {{.AdminSubject}} through client {{.AdminClient}}; {{.AdminScopes}}
         a person: billingd dev lists {{.AdminClient}} in PERSON_CLIENTS, as an operator lists
         their own dashboard (the signed-in pages are a person's without it)
  {{.AdminToken}}

The handshake, as the agent:

  curl -s -X POST {{.BaseURL}}/api/billing/upgrade -H 'Authorization: Bearer {{.AgentToken}}' -d '{"to":"scale"}'

  Nothing has changed yet: the answer is a summary and a confirm_token. To execute
  the upgrade, repeat the command within {{.ConfirmTTL}} with -d '{"to":"scale","confirm_token":"pbc_…"}'.

  curl -s {{.BaseURL}}/api/billing/subscription -H 'Authorization: Bearer {{.AgentToken}}'

  A downgrade can wait for the end of the period (nothing is charged or credited now):

  curl -s -X POST {{.BaseURL}}/api/billing/downgrade -H 'Authorization: Bearer {{.AgentToken}}' -d '{"to":"free","at":"period_end"}'

The audit log, as the admin:

  curl -s '{{.BaseURL}}/api/billing/audit?limit=10' -H 'Authorization: Bearer {{.AdminToken}}'

Sign-in, verify and approve in the browser (DEVELOPMENT ONLY login page, loopback only):

  Verify: make the org ask for a fresh sign-in on every change, as the admin,
    curl -s -X PUT {{.BaseURL}}/api/billing/policy -H 'Authorization: Bearer {{.AdminToken}}' -d '{"rules":[{"name":"prove it is you","action":"verify"}],"approval_window_seconds":600}'
  then make the first call as the agent (above): the answer has a verify_url. Open it, sign
  in as {{.AgentSubject}} on the dev login page, read the summary and press Confirm; the agent's
  second call then executes. Signed in as anyone else, the page refuses.
  Approve: use "action":"approve" instead, open the approval_url and sign in as {{.AdminSubject}}.

MCP client configuration (.mcp.json, ~/.cursor/mcp.json, ...), over HTTP:

{{.MCPOverHTTP}}

or over stdio, through this server (works while billingd dev runs):

{{.MCPOverStdio}}

Ctrl-C stops billingd and everything it started. Data stays in {{.Dir}}; remove it to start afresh.
`))
