package config

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/stripepay"
)

// env is a getenv over a map.
func env(vars map[string]string) func(string) string {
	return func(name string) string { return vars[name] }
}

func load(t *testing.T, vars map[string]string) Config {
	t.Helper()
	c, err := Load(env(vars))
	if err != nil {
		t.Fatalf("Load(%v): %v", vars, err)
	}
	return c
}

// writeFile writes data to a new file in a per-test directory and returns its path.
func writeFile(t *testing.T, name, data string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLoadDefaults(t *testing.T) {
	c := load(t, nil)
	checks := []struct {
		name      string
		got, want any
	}{
		{"ListenAddr", c.ListenAddr, "127.0.0.1:8080"},
		{"MetricsAddr", c.MetricsAddr, "127.0.0.1:9464"},
		{"PublicBaseURL", c.PublicBaseURL, "http://127.0.0.1:8080"},
		{"OAuthAudiences", strings.Join(c.OAuthAudiences, ","), "http://127.0.0.1:8080,http://127.0.0.1:8080/mcp"},
		{"OAuthOrgClaim", c.OAuthOrgClaim, "org_id"},
		{"ConfirmTTL", c.ConfirmTTL, 60 * time.Second},
		{"ConfirmClockSkew", c.ConfirmClockSkew, time.Duration(0)},
		{"MigrateOnStart", c.MigrateOnStart, true},
		{"Pprof", c.Pprof, false},
		{"LogFormat", c.LogFormat, "json"},
		{"DatabaseURL", c.DatabaseURL, ""},
		{"StripeSecretKey", c.StripeSecretKey, ""},
		{"StripeAPIBase", c.StripeAPIBase, ""},
		{"StripeWebhookSecret", c.StripeWebhookSecret, ""},
		{"OAuthIssuer", c.OAuthIssuer, ""},
		{"OAuthJWKSURL", c.OAuthJWKSURL, ""},
	}
	for _, ch := range checks {
		t.Run(ch.name, func(t *testing.T) {
			if ch.got != ch.want {
				t.Errorf("%s = %v, want %v", ch.name, ch.got, ch.want)
			}
		})
	}
	t.Run("Plans", func(t *testing.T) {
		if !slices.Equal(c.Plans, billing.DefaultPlans()) {
			t.Errorf("Plans = %+v, want the default catalog", c.Plans)
		}
	})
}

func TestLoadDerivedFromListenAddr(t *testing.T) {
	tests := []struct {
		name        string
		vars        map[string]string
		wantBase    string
		wantAudList []string
	}{
		{"listen addr", map[string]string{"LISTEN_ADDR": "0.0.0.0:9090"}, "http://0.0.0.0:9090",
			[]string{"http://0.0.0.0:9090", "http://0.0.0.0:9090/mcp"}},
		{"explicit base", map[string]string{"LISTEN_ADDR": ":9090", "PUBLIC_BASE_URL": "https://billing.example.com"},
			"https://billing.example.com", []string{"https://billing.example.com", "https://billing.example.com/mcp"}},
		{"base trailing slash trimmed", map[string]string{"PUBLIC_BASE_URL": "https://billing.example.com/"},
			"https://billing.example.com", []string{"https://billing.example.com", "https://billing.example.com/mcp"}},
		{"base with path", map[string]string{"PUBLIC_BASE_URL": "https://example.com/billing"},
			"https://example.com/billing", []string{"https://example.com/billing", "https://example.com/billing/mcp"}},
		{"explicit audience wins", map[string]string{"PUBLIC_BASE_URL": "https://b.example", "OAUTH_AUDIENCE": "api://billingd"},
			"https://b.example", []string{"api://billingd"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := load(t, tt.vars)
			if c.PublicBaseURL != tt.wantBase {
				t.Errorf("PublicBaseURL = %q, want %q", c.PublicBaseURL, tt.wantBase)
			}
			if !slices.Equal(c.OAuthAudiences, tt.wantAudList) {
				t.Errorf("OAuthAudiences = %q, want %q", c.OAuthAudiences, tt.wantAudList)
			}
		})
	}
}

func TestLoadAudienceList(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"https://a.example", []string{"https://a.example"}},
		{"https://a.example,https://a.example/mcp", []string{"https://a.example", "https://a.example/mcp"}},
		{" https://a.example , https://a.example/mcp ,api://x ", []string{"https://a.example", "https://a.example/mcp", "api://x"}},
		{"a,,b, ,c,", []string{"a", "b", "c"}},
		{"\thttps://a.example\t", []string{"https://a.example"}},
		// Only separators: as if unset.
		{" , ,", []string{"http://127.0.0.1:8080", "http://127.0.0.1:8080/mcp"}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			c := load(t, map[string]string{"OAUTH_AUDIENCE": tt.in})
			if !slices.Equal(c.OAuthAudiences, tt.want) {
				t.Errorf("OAuthAudiences = %q, want %q", c.OAuthAudiences, tt.want)
			}
		})
	}
}

func TestLoadValues(t *testing.T) {
	c := load(t, map[string]string{
		"DATABASE_URL":          "postgres://u:p@db:5432/billingd?sslmode=disable",
		"LISTEN_ADDR":           "[::1]:8443",
		"STRIPE_SECRET_KEY":     "sk_test_x",
		"STRIPE_API_BASE":       "http://127.0.0.1:12111",
		"STRIPE_WEBHOOK_SECRET": "whsec_x",
		"OAUTH_ISSUER":          "https://issuer.example",
		"OAUTH_JWKS_URL":        "https://issuer.example/jwks.json",
		"OAUTH_ORG_CLAIM":       "https://billing.example/org",
		"CONFIRM_TTL":           "15m",
		"CONFIRM_CLOCK_SKEW":    "300s",
		"MIGRATE_ON_START":      "false",
		"LOG_FORMAT":            "text",
		"MCP_REQUEST_STATE_KEY": "0123456789abcdef0123456789abcdef",
	})
	checks := []struct {
		name      string
		got, want any
	}{
		{"DatabaseURL", c.DatabaseURL, "postgres://u:p@db:5432/billingd?sslmode=disable"},
		{"ListenAddr", c.ListenAddr, "[::1]:8443"},
		{"PublicBaseURL", c.PublicBaseURL, "http://[::1]:8443"},
		{"StripeSecretKey", c.StripeSecretKey, "sk_test_x"},
		{"StripeAPIBase", c.StripeAPIBase, "http://127.0.0.1:12111"},
		{"StripeWebhookSecret", c.StripeWebhookSecret, "whsec_x"},
		{"OAuthIssuer", c.OAuthIssuer, "https://issuer.example"},
		{"OAuthJWKSURL", c.OAuthJWKSURL, "https://issuer.example/jwks.json"},
		{"OAuthOrgClaim", c.OAuthOrgClaim, "https://billing.example/org"},
		{"ConfirmTTL", c.ConfirmTTL, 15 * time.Minute},
		{"ConfirmClockSkew", c.ConfirmClockSkew, 300 * time.Second},
		{"MigrateOnStart", c.MigrateOnStart, false},
		{"LogFormat", c.LogFormat, "text"},
		{"MCPRequestStateKey", c.MCPRequestStateKey, "0123456789abcdef0123456789abcdef"},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s = %v, want %v", ch.name, ch.got, ch.want)
		}
	}
}

func TestLoadDurationBounds(t *testing.T) {
	tests := []struct {
		name, value string
		want        time.Duration
		valid       bool
	}{
		{"CONFIRM_TTL", "1s", time.Second, true},
		{"CONFIRM_TTL", "90s", 90 * time.Second, true},
		{"CONFIRM_TTL", "15m", 15 * time.Minute, true},
		{"CONFIRM_TTL", "0s", 0, false},
		{"CONFIRM_TTL", "999ms", 0, false},
		{"CONFIRM_TTL", "15m1s", 0, false},
		{"CONFIRM_TTL", "16m", 0, false},
		{"CONFIRM_TTL", "-60s", 0, false},
		{"CONFIRM_TTL", "abc", 0, false},
		{"CONFIRM_TTL", "60", 0, false},
		{"CONFIRM_CLOCK_SKEW", "0s", 0, true},
		{"CONFIRM_CLOCK_SKEW", "300s", 300 * time.Second, true},
		{"CONFIRM_CLOCK_SKEW", "5m", 5 * time.Minute, true},
		{"CONFIRM_CLOCK_SKEW", "301s", 0, false},
		{"CONFIRM_CLOCK_SKEW", "-1s", 0, false},
		{"CONFIRM_CLOCK_SKEW", "soon", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name+"="+tt.value, func(t *testing.T) {
			c, err := Load(env(map[string]string{tt.name: tt.value}))
			if !tt.valid {
				wantInvalid(t, err, tt.name, tt.value)
				return
			}
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			got := c.ConfirmTTL
			if tt.name == "CONFIRM_CLOCK_SKEW" {
				got = c.ConfirmClockSkew
			}
			if got != tt.want {
				t.Errorf("%s = %v, want %v", tt.name, got, tt.want)
			}
		})
	}
}

// wantInvalid checks that err is a configuration error that names the
// variable; and contains each of mentions.
func wantInvalid(t *testing.T, err error, variable string, mentions ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("Load accepted %s", variable)
	}
	msg := err.Error()
	if !strings.Contains(msg, variable+":") {
		t.Errorf("error %q does not name %s", msg, variable)
	}
	if !strings.HasPrefix(msg, "invalid configuration: ") {
		t.Errorf("error %q does not start with \"invalid configuration: \"", msg)
	}
	if strings.Contains(msg, "\n") {
		t.Errorf("error %q is not one line", msg)
	}
	for _, m := range mentions {
		if !strings.Contains(msg, m) {
			t.Errorf("error %q does not mention %q", msg, m)
		}
	}
}

func TestLoadInvalid(t *testing.T) {
	tests := []struct {
		name     string
		vars     map[string]string
		variable string
	}{
		{"ttl zero", map[string]string{"CONFIRM_TTL": "0s"}, "CONFIRM_TTL"},
		{"ttl too long", map[string]string{"CONFIRM_TTL": "16m"}, "CONFIRM_TTL"},
		{"ttl not a duration", map[string]string{"CONFIRM_TTL": "abc"}, "CONFIRM_TTL"},
		{"skew too long", map[string]string{"CONFIRM_CLOCK_SKEW": "301s"}, "CONFIRM_CLOCK_SKEW"},
		{"log format", map[string]string{"LOG_FORMAT": "xml"}, "LOG_FORMAT"},
		{"log format case", map[string]string{"LOG_FORMAT": "JSON"}, "LOG_FORMAT"},
		{"migrate maybe", map[string]string{"MIGRATE_ON_START": "maybe"}, "MIGRATE_ON_START"},
		{"migrate yes", map[string]string{"MIGRATE_ON_START": "yes"}, "MIGRATE_ON_START"},
		{"listen without port", map[string]string{"LISTEN_ADDR": "localhost"}, "LISTEN_ADDR"},
		{"listen url", map[string]string{"LISTEN_ADDR": "http://localhost:8080"}, "LISTEN_ADDR"},
		{"base ftp", map[string]string{"PUBLIC_BASE_URL": "ftp://files.example.com"}, "PUBLIC_BASE_URL"},
		{"base without scheme", map[string]string{"PUBLIC_BASE_URL": "billing.example.com"}, "PUBLIC_BASE_URL"},
		{"base without host", map[string]string{"PUBLIC_BASE_URL": "https://"}, "PUBLIC_BASE_URL"},
		{"database url", map[string]string{"DATABASE_URL": "not a url"}, "DATABASE_URL"},
		{"issuer without host", map[string]string{"OAUTH_ISSUER": "https://"}, "OAUTH_ISSUER"},
		{"issuer relative", map[string]string{"OAUTH_ISSUER": "/issuer"}, "OAUTH_ISSUER"},
		{"jwks relative", map[string]string{"OAUTH_JWKS_URL": "jwks.json"}, "OAUTH_JWKS_URL"},
		{"stripe base", map[string]string{"STRIPE_API_BASE": "127.0.0.1:12111"}, "STRIPE_API_BASE"},
		{"stripe timeout", map[string]string{"STRIPE_TIMEOUT": "0s"}, "STRIPE_TIMEOUT"},
		{"mcp state key too short", map[string]string{"MCP_REQUEST_STATE_KEY": "0123456789abcdef0123456789abcde"}, "MCP_REQUEST_STATE_KEY"},
		{"mcp replica id with a dot", map[string]string{"MCP_REPLICA_ID": "a.b"}, "MCP_REPLICA_ID"},
		{"mcp replica id upper case", map[string]string{"MCP_REPLICA_ID": "Replica1"}, "MCP_REPLICA_ID"},
		{"audience param unknown", map[string]string{"OIDC_AUDIENCE_PARAMS": "aud"}, "OIDC_AUDIENCE_PARAMS"},
		{"audience param none with another", map[string]string{"OIDC_AUDIENCE_PARAMS": "none,audience"}, "OIDC_AUDIENCE_PARAMS"},
		{"scope with a quote", map[string]string{"OIDC_SCOPES": `openid "billing:read"`}, "OIDC_SCOPES"},
		{"trusted proxy not a CIDR", map[string]string{"TRUSTED_PROXIES": "10.0.0.0/8,nginx"}, "TRUSTED_PROXIES"},
		{"trusted proxy without a length", map[string]string{"TRUSTED_PROXIES": "10.0.0.5"}, "TRUSTED_PROXIES"},
		{"trusted proxy with host bits", map[string]string{"TRUSTED_PROXIES": "10.1.2.3/8"}, "TRUSTED_PROXIES"},
		{"trusted proxy too long a prefix", map[string]string{"TRUSTED_PROXIES": "10.0.0.0/33"}, "TRUSTED_PROXIES"},
		{"person client with a space", map[string]string{"PERSON_CLIENTS": "acme dashboard"}, "PERSON_CLIENTS"},
		{"person client with a zero-width space", map[string]string{"PERSON_CLIENTS": "acme\u200bdashboard"}, "PERSON_CLIENTS"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(env(tt.vars))
			wantInvalid(t, err, tt.variable)
		})
	}
}

func TestLoadNamesEveryInvalidVariable(t *testing.T) {
	_, err := Load(env(map[string]string{"CONFIRM_TTL": "0s", "LOG_FORMAT": "xml", "MIGRATE_ON_START": "maybe"}))
	for _, v := range []string{"CONFIRM_TTL", "LOG_FORMAT", "MIGRATE_ON_START"} {
		wantInvalid(t, err, v)
	}
}

func TestLoadBooleans(t *testing.T) {
	for in, want := range map[string]bool{"true": true, "false": false, "1": true, "0": false, "TRUE": true, "False": false} {
		t.Run(in, func(t *testing.T) {
			if c := load(t, map[string]string{"MIGRATE_ON_START": in}); c.MigrateOnStart != want {
				t.Errorf("MigrateOnStart = %v, want %v", c.MigrateOnStart, want)
			}
		})
	}
}

func TestLoadDatabaseURLWithoutHost(t *testing.T) {
	// A Unix-socket URL has no host; DATABASE_URL allows it.
	const u = "postgres:///billingd?host=/var/run/postgresql"
	if c := load(t, map[string]string{"DATABASE_URL": u}); c.DatabaseURL != u {
		t.Errorf("DatabaseURL = %q", c.DatabaseURL)
	}
}

func TestLoadPlansFile(t *testing.T) {
	const valid = `[
		{"id":"scale","name":"Scale","amount_cents":4900,"currency":"usd","interval":"month","stripe_price_id":"price_scale"},
		{"id":"starter","name":"Starter","amount_cents":900,"currency":"usd","interval":"month","stripe_price_id":"price_starter"}
	]`
	t.Run("valid", func(t *testing.T) {
		c := load(t, map[string]string{"PLANS_FILE": writeFile(t, "plans.json", valid)})
		want := []billing.Plan{
			{ID: "scale", Name: "Scale", AmountCents: 4900, Currency: "usd", Interval: "month", StripePriceID: "price_scale"},
			{ID: "starter", Name: "Starter", AmountCents: 900, Currency: "usd", Interval: "month", StripePriceID: "price_starter"},
		}
		if !slices.Equal(c.Plans, want) {
			t.Errorf("Plans = %+v, want %+v", c.Plans, want)
		}
		if _, err := billing.NewCatalog(c.Plans); err != nil {
			t.Errorf("NewCatalog of the loaded plans: %v", err)
		}
	})

	invalid := []struct {
		name, data string
		mention    string
	}{
		{"not json", `{"id":`, "parse"},
		{"object not array", `{"id":"pro"}`, "parse"},
		{"wrong type", `[{"id":"pro","amount_cents":"19.00"}]`, "parse"},
		{"empty array", `[]`, "empty"},
		{"null", `null`, "empty"},
		{"duplicate id", `[
			{"id":"pro","name":"Pro","amount_cents":1900,"currency":"usd","interval":"month","stripe_price_id":"price_a"},
			{"id":"pro","name":"Pro 2","amount_cents":2900,"currency":"usd","interval":"month","stripe_price_id":"price_b"}]`, "duplicate"},
		{"equal prices", `[
			{"id":"a","name":"A","amount_cents":1900,"currency":"usd","interval":"month","stripe_price_id":"price_a"},
			{"id":"b","name":"B","amount_cents":1900,"currency":"usd","interval":"month","stripe_price_id":"price_b"}]`, "same price"},
		{"missing price id", `[{"id":"a","name":"A","amount_cents":1900,"currency":"usd","interval":"month"}]`, "required"},
		{"bad interval", `[{"id":"a","name":"A","amount_cents":1900,"currency":"usd","interval":"week","stripe_price_id":"p"}]`, "interval"},
	}
	for _, tt := range invalid {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(env(map[string]string{"PLANS_FILE": writeFile(t, "plans.json", tt.data)}))
			wantInvalid(t, err, "PLANS_FILE", tt.mention)
		})
	}
	t.Run("missing file", func(t *testing.T) {
		_, err := Load(env(map[string]string{"PLANS_FILE": filepath.Join(t.TempDir(), "nope.json")}))
		wantInvalid(t, err, "PLANS_FILE", "nope.json")
	})
	t.Run("directory", func(t *testing.T) {
		_, err := Load(env(map[string]string{"PLANS_FILE": t.TempDir()}))
		wantInvalid(t, err, "PLANS_FILE")
	})
}

func TestRequire(t *testing.T) {
	full := map[string]string{
		"DATABASE_URL": "postgres://db/billingd", "STRIPE_SECRET_KEY": "sk_test_x", "OAUTH_ISSUER": "https://issuer.example",
	}
	serve := []string{"DATABASE_URL", "STRIPE_SECRET_KEY", "OAUTH_ISSUER"}
	tests := []struct {
		name    string
		unset   []string
		names   []string
		missing string // "" for no error
	}{
		{"all set", nil, serve, ""},
		{"nothing required", serve, nil, ""},
		{"database url missing", []string{"DATABASE_URL"}, serve, "DATABASE_URL"},
		{"stripe key missing", []string{"STRIPE_SECRET_KEY"}, serve, "STRIPE_SECRET_KEY"},
		{"issuer missing", []string{"OAUTH_ISSUER"}, serve, "OAUTH_ISSUER"},
		{"first missing is named", []string{"STRIPE_SECRET_KEY", "OAUTH_ISSUER"}, serve, "STRIPE_SECRET_KEY"},
		{"only what is asked", []string{"STRIPE_SECRET_KEY"}, []string{"DATABASE_URL"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vars := map[string]string{}
			for k, v := range full {
				if !slices.Contains(tt.unset, k) {
					vars[k] = v
				}
			}
			err := load(t, vars).Require(tt.names...)
			if tt.missing == "" {
				if err != nil {
					t.Fatalf("Require: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Require passed with %s unset", tt.missing)
			}
			if !strings.Contains(err.Error(), tt.missing) {
				t.Errorf("error %q does not name %s", err, tt.missing)
			}
			for _, other := range serve {
				if other != tt.missing && strings.Contains(err.Error(), other) {
					t.Errorf("error %q names %s too", err, other)
				}
			}
		})
	}
}

func TestStripeLivemode(t *testing.T) {
	for key, live := range map[string]bool{
		"sk_test_abc": false, "rk_test_abc": false, "sk_live_abc": true, "rk_live_abc": true,
	} {
		if got := (Config{StripeSecretKey: key}).StripeLivemode(); got != live {
			t.Errorf("StripeLivemode(%s) = %t, want %t", key, got, live)
		}
	}
}

// TestLoadMetricsAddr: METRICS_ADDR is host:port, off disables the metrics
// listener, anything else stops the process naming the variable.
func TestLoadMetricsAddr(t *testing.T) {
	for value, want := range map[string]string{"": DefaultMetricsAddr, "off": "", "0.0.0.0:9100": "0.0.0.0:9100", "127.0.0.1:0": "127.0.0.1:0"} {
		if got := load(t, map[string]string{"METRICS_ADDR": value}).MetricsAddr; got != want {
			t.Errorf("METRICS_ADDR=%q: %q, want %q", value, got, want)
		}
	}
	for _, bad := range []string{"9100", "yes", "http://127.0.0.1:9100"} {
		if _, err := Load(env(map[string]string{"METRICS_ADDR": bad})); err == nil || !strings.Contains(err.Error(), "METRICS_ADDR") {
			t.Errorf("METRICS_ADDR=%q: %v", bad, err)
		}
	}
}

// TestLoadSignInRequest: the audience parameters and scopes of the pages'
// sign-in (issue 22): both parameters and the default scopes unless set,
// none for providers that set the audience on the server, scopes separated
// by spaces or commas.
func TestLoadSignInRequest(t *testing.T) {
	for _, tc := range []struct {
		vars         map[string]string
		params, scps []string
	}{
		{map[string]string{}, []string{"audience", "resource"}, nil},
		{map[string]string{"OIDC_AUDIENCE_PARAMS": "audience"}, []string{"audience"}, nil},
		{map[string]string{"OIDC_AUDIENCE_PARAMS": "resource, audience"}, []string{"resource", "audience"}, nil},
		{map[string]string{"OIDC_AUDIENCE_PARAMS": "none", "OIDC_SCOPES": "openid api://b/billing:read,billing:admin"},
			nil, []string{"openid", "api://b/billing:read", "billing:admin"}},
	} {
		c := load(t, tc.vars)
		if !slices.Equal(c.OIDCAudienceParams, tc.params) || !slices.Equal(c.OIDCScopes, tc.scps) {
			t.Errorf("%v: params %q, scopes %q", tc.vars, c.OIDCAudienceParams, c.OIDCScopes)
		}
	}
}

// TestLoadLoadSettings: the settings of issue 20 (executions at once,
// stripe-go's retries), their defaults and bounds.
func TestLoadLoadSettings(t *testing.T) {
	c := load(t, nil)
	if c.ConfirmConcurrency != billing.DefaultMaxExecutions || c.StripeMaxNetworkRetries != stripepay.DefaultMaxNetworkRetries {
		t.Errorf("defaults: CONFIRM_CONCURRENCY %d, STRIPE_MAX_NETWORK_RETRIES %d", c.ConfirmConcurrency, c.StripeMaxNetworkRetries)
	}
	c = load(t, map[string]string{"CONFIRM_CONCURRENCY": "8", "STRIPE_MAX_NETWORK_RETRIES": "0"})
	if c.ConfirmConcurrency != 8 || c.StripeMaxNetworkRetries != 0 {
		t.Errorf("set: CONFIRM_CONCURRENCY %d, STRIPE_MAX_NETWORK_RETRIES %d", c.ConfirmConcurrency, c.StripeMaxNetworkRetries)
	}
	if stripepayMaxRetries != stripepay.MaxNetworkRetriesLimit {
		t.Errorf("STRIPE_MAX_NETWORK_RETRIES' bound %d, stripepay's %d", stripepayMaxRetries, stripepay.MaxNetworkRetriesLimit)
	}
	for name, bad := range map[string][]string{
		"CONFIRM_CONCURRENCY":        {"0", "1001", "-1", "many"},
		"STRIPE_MAX_NETWORK_RETRIES": {"-1", "4", "x"},
	} {
		for _, v := range bad {
			_, err := Load(env(map[string]string{name: v}))
			if err == nil || !strings.Contains(err.Error(), name) {
				t.Errorf("%s=%q: %v, want an error naming it", name, v, err)
			}
		}
	}
}

// TestLoadTrustedProxies: TRUSTED_PROXIES is a list of CIDRs, IPv4 and
// IPv6; unset, no proxy is trusted.
func TestLoadTrustedProxies(t *testing.T) {
	if c := load(t, nil); len(c.TrustedProxies) != 0 {
		t.Errorf("default TrustedProxies = %v, want none", c.TrustedProxies)
	}
	c := load(t, map[string]string{"TRUSTED_PROXIES": " 127.0.0.1/32, 10.0.0.0/8,fd00::/8 "})
	got := make([]string, len(c.TrustedProxies))
	for i, p := range c.TrustedProxies {
		got[i] = p.String()
	}
	if want := []string{"127.0.0.1/32", "10.0.0.0/8", "fd00::/8"}; !slices.Equal(got, want) {
		t.Errorf("TrustedProxies = %v, want %v", got, want)
	}
}

// TestLoadPersonClients: PERSON_CLIENTS is read once into a list of client
// ids; unset, no client is a person's (contract §3, §4).
func TestLoadPersonClients(t *testing.T) {
	if c := load(t, nil); len(c.PersonClients) != 0 {
		t.Errorf("default %q, want none", c.PersonClients)
	}
	c := load(t, map[string]string{"PERSON_CLIENTS": " acme-dashboard,, console "})
	if !slices.Equal(c.PersonClients, []string{"acme-dashboard", "console"}) {
		t.Errorf("PersonClients %q", c.PersonClients)
	}
}

// TestLiveKeyNeedsReceiptKeys: with a live Stripe key, serve refuses to
// start without RECEIPT_SIGNING_KEYS, naming it (contract §11, key custody).
func TestLiveKeyNeedsReceiptKeys(t *testing.T) {
	for _, tt := range []struct {
		key, files string
		refused    bool
	}{
		{"sk_live_abc", "", true}, {"rk_live_abc", "", true}, {"sk_x", "", true},
		{"sk_live_abc", "/keys/a.pem", false}, {"sk_test_abc", "", false}, {"rk_test_abc", "", false},
	} {
		cfg, err := Load(env(map[string]string{"STRIPE_SECRET_KEY": tt.key, "RECEIPT_SIGNING_KEYS": tt.files}))
		if err != nil {
			t.Fatal(err)
		}
		err = cfg.CheckReceiptKeyCustody()
		if tt.refused != (err != nil) || err != nil && !strings.Contains(err.Error(), "RECEIPT_SIGNING_KEYS") {
			t.Errorf("%s with %q: %v", tt.key, tt.files, err)
		}
	}
}
