// Package signin signs people in on billingd's pages (dashboard, approval
// page, verification page) with OpenID Connect: the authorization code flow
// with PKCE against OAUTH_ISSUER (contract §10).
//
// The libraries do the protocol: golang.org/x/oauth2 builds the
// authorization request and exchanges the code (with the PKCE verifier),
// and coreos/go-oidc verifies the ID token's signature, issuer, audience
// (our client id) and expiry. This package adds what only billingd knows:
// the nonce it sent, that sub is a name a person can read (contract §4), and
// for a verification sign-in that the person authenticated at or after the
// moment billingd asked (auth_time, with max_age=0 and prompt=login sent).
//
// What it asks for follows the providers operators run, not one RFC: the
// access token must be for billingd's API, and providers learn that in
// different ways (Hydra and Auth0 read the audience parameter, RFC 8707
// servers read resource, Okta, Keycloak and Entra ID configure it on the
// server), so the parameters are configurable (OIDC_AUDIENCE_PARAMS); the
// billing scopes the pages need are requested explicitly (OIDC_SCOPES),
// since a provider's consent grants only what was asked for.
package signin

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/billingd/billingd/internal/auth"
)

// Config configures a Client.
type Config struct {
	Issuer       string // OAUTH_ISSUER
	ClientID     string // OIDC_CLIENT_ID
	ClientSecret string // OIDC_CLIENT_SECRET; empty for a public client
	RedirectURL  string // PUBLIC_BASE_URL + "/auth/callback"
	// Audience is billingd's API as the provider names it (the first
	// OAUTH_AUDIENCE value), asked for with AudienceParams so that the
	// access token is billingd's.
	Audience string
	// AudienceParams (OIDC_AUDIENCE_PARAMS) are the authorization request
	// parameters that carry Audience: ParamAudience, ParamResource (RFC
	// 8707), both, or none (empty) for providers that configure the
	// audience on the server.
	AudienceParams []string
	// Scopes (OIDC_SCOPES) are the scopes requested; openid is added when
	// missing. Empty: DefaultScopes.
	Scopes []string
	// ClockSkew is tolerated on auth_time (CONFIRM_CLOCK_SKEW).
	ClockSkew time.Duration
	// HTTPClient reaches the issuer; nil: a client with a 10 s timeout.
	HTTPClient *http.Client
}

// The authorization request parameters that can name the API audience.
const (
	// ParamAudience is the audience parameter of ORY Hydra and Auth0.
	ParamAudience = "audience"
	// ParamResource is RFC 8707's resource indicator.
	ParamResource = "resource"
)

// DefaultScopes are requested when OIDC_SCOPES is unset: the sign-in, and
// every billing scope a page may need (the dashboard reads and changes the
// plan, an admin sees the audit log and approves). The provider grants what
// the person may have; the session gets what was granted.
var DefaultScopes = []string{oidc.ScopeOpenID, "profile", auth.ScopeRead, auth.ScopeWrite, auth.ScopeAdmin}

// Client is billingd as an OpenID Connect relying party.
type Client struct {
	oauth          oauth2.Config
	verifier       *oidc.IDTokenVerifier
	issuer         string
	audience       string
	audienceParams []string
	skew           time.Duration
	http           *http.Client
}

// New discovers the issuer's OpenID configuration. ctx bounds discovery.
// The issuer's metadata may spell the issuer with or without a trailing
// slash where cfg.Issuer does not (auth.SameIssuer); any other difference
// is an *auth.IssuerMismatchError.
func New(ctx context.Context, cfg Config) (*Client, error) {
	if cfg.Issuer == "" || cfg.ClientID == "" || cfg.RedirectURL == "" {
		return nil, errors.New("signin: issuer, client id and redirect URL are required")
	}
	for _, p := range cfg.AudienceParams {
		if p != ParamAudience && p != ParamResource {
			return nil, fmt.Errorf("signin: unknown audience parameter %q", p)
		}
	}
	if len(cfg.AudienceParams) > 0 && cfg.Audience == "" {
		return nil, errors.New("signin: an audience parameter without an audience")
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 10 * time.Second}
	}
	provider, err := discover(oidc.ClientContext(ctx, cfg.HTTPClient), cfg.Issuer)
	if err != nil {
		return nil, err
	}
	return &Client{
		oauth: oauth2.Config{ClientID: cfg.ClientID, ClientSecret: cfg.ClientSecret, RedirectURL: cfg.RedirectURL,
			Endpoint: provider.Endpoint(), Scopes: withOpenID(cfg.Scopes)},
		// The key set is fetched with a context of its own: it outlives ctx.
		// The issuer is checked by checkIDToken with the one rule
		// billingd applies everywhere (auth.SameIssuer).
		verifier: provider.VerifierContext(oidc.ClientContext(context.Background(), cfg.HTTPClient),
			&oidc.Config{ClientID: cfg.ClientID, SkipIssuerCheck: true}),
		issuer: cfg.Issuer, audience: cfg.Audience, audienceParams: cfg.AudienceParams,
		skew: cfg.ClockSkew, http: cfg.HTTPClient,
	}, nil
}

// discover reads the issuer's OpenID configuration. go-oidc wants the
// metadata's issuer spelled exactly as configured; a difference of a
// trailing slash only is the same issuer (auth.SameIssuer), so discovery is
// repeated with the metadata's own spelling.
func discover(ctx context.Context, issuer string) (*oidc.Provider, error) {
	provider, err := oidc.NewProvider(ctx, issuer)
	var mismatch *oidc.IssuerMismatchError
	if errors.As(err, &mismatch) {
		if !auth.SameIssuer(mismatch.Discovered, issuer) {
			return nil, &auth.IssuerMismatchError{Configured: issuer, Discovered: mismatch.Discovered}
		}
		provider, err = oidc.NewProvider(ctx, mismatch.Discovered)
	}
	if err != nil {
		return nil, fmt.Errorf("signin: discover %s: %w", issuer, err)
	}
	return provider, nil
}

// withOpenID is scopes (DefaultScopes when empty) with openid first: an
// OpenID Connect sign-in without it gets no ID token.
func withOpenID(scopes []string) []string {
	if len(scopes) == 0 {
		return slices.Clone(DefaultScopes)
	}
	if slices.Contains(scopes, oidc.ScopeOpenID) {
		return slices.Clone(scopes)
	}
	return append([]string{oidc.ScopeOpenID}, scopes...)
}

// Request is one sign-in in progress: what billingd sent and must see again.
type Request struct {
	State    string // binds the callback to this request
	Nonce    string // binds the ID token to this request
	Verifier string // PKCE code verifier (S256)
}

// NewRequest makes a request with fresh random values.
func NewRequest() Request {
	return Request{State: rand.Text(), Nonce: rand.Text(), Verifier: oauth2.GenerateVerifier()}
}

// AuthURL is where the browser goes to sign in. fresh asks the identity
// provider to authenticate the person again whatever session it has
// (max_age=0, prompt=login): the verification page's sign-in. acrValues,
// when set, asks for those authentication classes.
func (c *Client) AuthURL(r Request, fresh bool, acrValues []string) string {
	opts := []oauth2.AuthCodeOption{oidc.Nonce(r.Nonce), oauth2.S256ChallengeOption(r.Verifier)}
	for _, p := range c.audienceParams {
		opts = append(opts, oauth2.SetAuthURLParam(p, c.audience))
	}
	if fresh {
		opts = append(opts, oauth2.SetAuthURLParam("max_age", "0"), oauth2.SetAuthURLParam("prompt", "login"))
	}
	if len(acrValues) > 0 {
		opts = append(opts, oauth2.SetAuthURLParam("acr_values", strings.Join(acrValues, " ")))
	}
	return c.oauth.AuthCodeURL(r.State, opts...)
}

// Result is a completed sign-in.
type Result struct {
	Subject     string    // the ID token's sub
	AuthTime    time.Time // when the person authenticated (zero: not said)
	ACR         string    // how
	AccessToken string    // for billingd's API, verified by the caller
}

// ErrSignIn wraps every refusal of a callback.
var ErrSignIn = errors.New("sign-in refused")

// Exchange redeems the code with the request's PKCE verifier and checks the
// ID token. authenticatedAfter, when not zero, is the earliest auth_time
// accepted (less the clock skew): a verification sign-in must be a new
// authentication, not an identity provider session from before.
func (c *Client) Exchange(ctx context.Context, code string, r Request, authenticatedAfter time.Time) (Result, error) {
	tok, err := c.oauth.Exchange(oidc.ClientContext(ctx, c.http), code, oauth2.VerifierOption(r.Verifier))
	if err != nil {
		return Result{}, fmt.Errorf("%w: code exchange: %w", ErrSignIn, err)
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return Result{}, fmt.Errorf("%w: no id_token", ErrSignIn)
	}
	res, err := c.checkIDToken(ctx, raw, r.Nonce, authenticatedAfter)
	if err != nil {
		return Result{}, err
	}
	res.AccessToken = tok.AccessToken
	return res, nil
}

// idClaims are the ID token claims billingd reads beyond those go-oidc
// checks.
type idClaims struct {
	AuthTime *float64 `json:"auth_time"`
	ACR      *string  `json:"acr"`
}

// checkIDToken verifies raw (signature, iss, aud, exp by go-oidc) and then
// the nonce, sub, auth_time and acr.
func (c *Client) checkIDToken(ctx context.Context, raw, nonce string, authenticatedAfter time.Time) (Result, error) {
	idt, err := c.verifier.Verify(ctx, raw)
	if err != nil {
		return Result{}, fmt.Errorf("%w: id_token: %w", ErrSignIn, err)
	}
	if !auth.SameIssuer(idt.Issuer, c.issuer) {
		return Result{}, fmt.Errorf("%w: id_token from another issuer", ErrSignIn)
	}
	if subtle.ConstantTimeCompare([]byte(idt.Nonce), []byte(nonce)) != 1 || nonce == "" {
		return Result{}, fmt.Errorf("%w: id_token nonce does not match", ErrSignIn)
	}
	if !auth.SafeIdentifier(idt.Subject) || idt.Subject == "" {
		return Result{}, fmt.Errorf("%w: id_token sub missing or not displayable", ErrSignIn)
	}
	var claims idClaims
	if err := idt.Claims(&claims); err != nil {
		return Result{}, fmt.Errorf("%w: id_token claims: %w", ErrSignIn, err)
	}
	res := Result{Subject: idt.Subject}
	if claims.AuthTime != nil {
		res.AuthTime = time.Unix(int64(*claims.AuthTime), 0)
	}
	if claims.ACR != nil {
		if !auth.SafeIdentifier(*claims.ACR) {
			return Result{}, fmt.Errorf("%w: id_token acr not displayable", ErrSignIn)
		}
		res.ACR = *claims.ACR
	}
	if !authenticatedAfter.IsZero() &&
		(res.AuthTime.IsZero() || res.AuthTime.Before(authenticatedAfter.Add(-c.skew).Truncate(time.Second))) {
		return Result{}, fmt.Errorf("%w: the identity provider did not authenticate the person afresh (auth_time)", ErrSignIn)
	}
	return res, nil
}
