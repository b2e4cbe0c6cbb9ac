// Package auth verifies the bearer access tokens that every billingd API call
// carries (contract §4).
//
// A token is a JWT signed by the configured OAuth issuer with an asymmetric
// algorithm; its keys come from the issuer's JWKS, which is discovered from the
// issuer's metadata unless configured. Verify checks the signature, iss, aud,
// exp (required) and nbf, and returns the caller's Identity: principal (sub),
// org (a configurable claim), client (azp or client_id) and scopes. Every
// rejection wraps ErrInvalidToken, so transports can answer 401 with one
// errors.Is check; the error text is a short reason safe to log, never the
// token or values taken from it.
//
// The package knows nothing about HTTP frameworks or MCP: adapters extract the
// bearer token, call Verify, and check scopes with Identity.HasScope.
package auth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/time/rate"
)

// Scopes defined by the contract. A scope grants exactly what its name says:
// ScopeAdmin does not imply the others.
const (
	ScopeRead  = "billing:read"
	ScopeWrite = "billing:write"
	ScopeAdmin = "billing:admin"
)

// DefaultOrgClaim is the claim naming the caller's org when Config.OrgClaim is
// empty (OAUTH_ORG_CLAIM's default).
const DefaultOrgClaim = "org_id"

// MaxTokenLength bounds the raw token. Real access tokens are well under 2 KiB;
// refusing larger input before parsing keeps base64 and JSON decoding of
// attacker-sized input off the request path.
const MaxTokenLength = 8 << 10

// Key refresh policy. keyfunc's defaults refresh on an unknown kid at most
// once per 5 minutes, so a single bogus kid delayed the pickup of a real key
// rotation by that long (field notes). 30 s bounds that delay while still
// keeping a flood of made-up kids from turning into a flood of JWKS requests;
// the periodic refresh catches rotations nobody has presented a token for yet.
const (
	unknownKIDRefreshEvery = 30 * time.Second
	periodicRefresh        = 5 * time.Minute
	// jwksHTTPTimeout bounds each JWKS and metadata request. The same bound
	// caps how long a request with an unknown kid may wait for the rate
	// limiter plus the refresh (keyfunc uses one context for both), so such a
	// request fails fast instead of queueing behind the 30 s limiter.
	jwksHTTPTimeout = 10 * time.Second
)

// allowedMethods lists the asymmetric JWS algorithms. HMAC is excluded so a
// token "signed" with the public key as an HMAC secret cannot pass, and none
// is excluded for the obvious reason.
var allowedMethods = []string{
	"RS256", "RS384", "RS512",
	"PS256", "PS384", "PS512",
	"ES256", "ES384", "ES512",
	"EdDSA",
}

// ErrInvalidToken is wrapped by every error Verify returns.
var ErrInvalidToken = errors.New("invalid token")

// Config configures a Verifier. Issuer and at least one audience are required.
type Config struct {
	// Issuer is the iss expected in tokens (OAUTH_ISSUER), compared with
	// SameIssuer.
	Issuer string
	// JWKSURL is the issuer's key set. Empty: discovered from the issuer's
	// metadata (RFC 8414, then OpenID Connect Discovery).
	JWKSURL string
	// Audiences are the accepted aud values; a token must carry at least one.
	Audiences []string
	// OrgClaim names the claim that carries the org. Empty: DefaultOrgClaim.
	OrgClaim string
	// Leeway is the clock skew tolerated on exp and nbf.
	Leeway time.Duration
	// HTTPClient fetches metadata and keys. Nil: a client with a 10 s timeout.
	HTTPClient *http.Client
}

// Verifier verifies access tokens. It is safe for concurrent use. Call Close
// when done to stop the background key refresh.
type Verifier struct {
	// issuer is Config.Issuer as the issuer's metadata spells it, when it
	// was discovered.
	issuer   string
	orgClaim string
	keys     keyfunc.Keyfunc
	options  []jwt.ParserOption
	leeway   time.Duration // Config.Leeway, also in options
	stop     context.CancelFunc
	verified verifiedCache
}

// NewVerifier validates cfg, discovers the JWKS URL when it is not given, and
// fetches the key set once. ctx bounds discovery only. An unreachable issuer or
// JWKS is an error here, so a misconfigured URL stops the process at start
// instead of turning every request into a 401.
func NewVerifier(ctx context.Context, cfg Config) (*Verifier, error) {
	cfg, err := withDefaults(cfg)
	if err != nil {
		return nil, err
	}
	jwksURL, issuer := cfg.JWKSURL, cfg.Issuer
	if jwksURL == "" {
		if jwksURL, issuer, err = discoverJWKSURL(ctx, cfg.HTTPClient, cfg.Issuer); err != nil {
			return nil, err
		}
	}
	// The refresh goroutine must outlive ctx (often a startup deadline), so it
	// gets its own lifetime, ended by Close.
	bg, stop := context.WithCancel(context.WithoutCancel(ctx))
	keys, err := newKeyfunc(bg, cfg.HTTPClient, jwksURL)
	if err != nil {
		stop()
		return nil, err
	}
	return &Verifier{
		issuer:   issuer,
		orgClaim: cfg.OrgClaim,
		keys:     keys,
		options:  parserOptions(cfg),
		leeway:   cfg.Leeway,
		stop:     stop,
	}, nil
}

// Issuer is the issuer as its metadata spells it (OAUTH_ISSUER itself when
// the JWKS URL was configured): what billingd names as its authorization
// server, for clients that compare issuers exactly (RFC 8414 §3.3).
func (v *Verifier) Issuer() string { return v.issuer }

// Close stops the background key refresh. Verify must not be called after.
func (v *Verifier) Close() {
	v.stop()
}

func withDefaults(cfg Config) (Config, error) {
	if cfg.Issuer == "" {
		return cfg, errors.New("auth: issuer is required")
	}
	if len(cfg.Audiences) == 0 {
		return cfg, errors.New("auth: at least one audience is required")
	}
	for _, a := range cfg.Audiences {
		if a == "" {
			// jwt treats aud "" as absent; an empty entry is a config slip.
			return cfg, errors.New("auth: empty audience")
		}
	}
	if cfg.Leeway < 0 {
		return cfg, errors.New("auth: negative leeway")
	}
	if cfg.JWKSURL != "" {
		if err := checkHTTPURL(cfg.JWKSURL); err != nil {
			return cfg, fmt.Errorf("auth: JWKS URL: %w", err)
		}
	}
	if cfg.OrgClaim == "" {
		cfg.OrgClaim = DefaultOrgClaim
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: jwksHTTPTimeout}
	}
	return cfg, nil
}

// newKeyfunc builds the JWKS-backed key lookup with the refresh policy above.
// The refresh goroutine runs until ctx is cancelled.
func newKeyfunc(ctx context.Context, client *http.Client, jwksURL string) (keyfunc.Keyfunc, error) {
	failFirstFetch := false
	kf, err := keyfunc.NewDefaultOverrideCtx(ctx, []string{jwksURL}, keyfunc.Override{
		Client:                    client,
		HTTPTimeout:               jwksHTTPTimeout,
		NoErrorReturnFirstHTTPReq: &failFirstFetch,
		RateLimitWaitMax:          jwksHTTPTimeout,
		RefreshInterval:           periodicRefresh,
		RefreshUnknownKID:         rate.NewLimiter(rate.Every(unknownKIDRefreshEvery), 1),
	})
	if err != nil {
		return nil, fmt.Errorf("auth: load JWKS: %w", err)
	}
	return kf, nil
}

func parserOptions(cfg Config) []jwt.ParserOption {
	return []jwt.ParserOption{
		jwt.WithValidMethods(allowedMethods),
		// iss is checked by Verify with SameIssuer, not jwt's exact match.
		jwt.WithAudience(cfg.Audiences...),
		jwt.WithExpirationRequired(),
		jwt.WithLeeway(cfg.Leeway),
	}
}

func checkHTTPURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("not a URL")
	}
	if u.Scheme != "https" && u.Scheme != "http" {
		return errors.New("scheme must be http or https")
	}
	if u.Host == "" {
		return errors.New("no host")
	}
	return nil
}
