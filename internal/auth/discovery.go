package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

const (
	oauthMetadataDoc = "/.well-known/oauth-authorization-server"
	openIDConfigDoc  = "/.well-known/openid-configuration"
	// maxMetadataBytes caps a metadata document; real ones are a few KiB.
	maxMetadataBytes = 1 << 20
)

// issuerMetadata is the part of RFC 8414 / OpenID Discovery metadata we use.
type issuerMetadata struct {
	Issuer  string `json:"issuer"`
	JWKSURI string `json:"jwks_uri"`
}

// IssuerMismatchError is the issuer's metadata naming another issuer than
// OAUTH_ISSUER (beyond a trailing slash, see SameIssuer): keys and tokens of
// a different authority are never trusted, and billingd does not start.
type IssuerMismatchError struct {
	Configured string // OAUTH_ISSUER
	Discovered string // the metadata's issuer
	URL        string // where the metadata was read, when known
}

func (e *IssuerMismatchError) Error() string {
	at := ""
	if e.URL != "" {
		at = " at " + e.URL
	}
	return fmt.Sprintf("OAUTH_ISSUER is %q but the identity provider's metadata%s names issuer %q: set OAUTH_ISSUER to the provider's issuer (with or without its trailing slash)",
		e.Configured, at, e.Discovered)
}

// discoverJWKSURL finds the issuer's jwks_uri by trying each metadata address
// in turn, and the issuer as the metadata spells it. The first document
// that answers decides: if it names another issuer, discovery fails rather
// than trust keys from a different authority (RFC 8414 §3.3).
func discoverJWKSURL(ctx context.Context, client *http.Client, issuer string) (jwksURL, spelled string, err error) {
	candidates, err := metadataURLs(issuer)
	if err != nil {
		return "", "", err
	}
	var errs []error
	for _, u := range candidates {
		md, err := fetchMetadata(ctx, client, u)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", u, err))
			continue
		}
		if !SameIssuer(md.Issuer, issuer) {
			return "", "", &IssuerMismatchError{Configured: issuer, Discovered: md.Issuer, URL: u}
		}
		if err := checkHTTPURL(md.JWKSURI); err != nil {
			return "", "", fmt.Errorf("auth: metadata at %s: jwks_uri: %w", u, err)
		}
		return md.JWKSURI, md.Issuer, nil
	}
	return "", "", fmt.Errorf("auth: discover JWKS of issuer %s: %w", issuer, errors.Join(errs...))
}

// metadataURLs lists where an issuer's metadata may be, in the order the MCP
// authorization spec tries them. For an issuer with a path, RFC 8414 inserts
// the well-known segment between host and path; OpenID Discovery appends it,
// and some servers use insertion for OpenID too.
func metadataURLs(issuer string) ([]string, error) {
	u, err := url.Parse(issuer)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("auth: issuer %q is not an http(s) URL", issuer)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("auth: issuer %q has a query or fragment", issuer)
	}
	origin := u.Scheme + "://" + u.Host
	path := strings.TrimSuffix(u.EscapedPath(), "/")
	if path == "" {
		return []string{origin + oauthMetadataDoc, origin + openIDConfigDoc}, nil
	}
	return []string{
		origin + oauthMetadataDoc + path,
		origin + openIDConfigDoc + path,
		origin + path + openIDConfigDoc,
	}, nil
}

func fetchMetadata(ctx context.Context, client *http.Client, u string) (issuerMetadata, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return issuerMetadata{}, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return issuerMetadata{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return issuerMetadata{}, fmt.Errorf("status %d", resp.StatusCode)
	}
	var md issuerMetadata
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxMetadataBytes)).Decode(&md); err != nil {
		return issuerMetadata{}, fmt.Errorf("decode metadata: %w", err)
	}
	return md, nil
}

// SameIssuer is billingd's one rule for issuer identifiers, applied to the
// issuer's metadata, to access tokens' iss and to ID tokens' iss: equal, or
// equal but for one trailing slash. Operators write OAUTH_ISSUER with or
// without one (ORY Hydra's issuer ends with "/", Keycloak's and Okta's do
// not), and both spellings name the same authority; anything else is
// another issuer. Empty names no issuer.
func SameIssuer(a, b string) bool {
	if a == "" || b == "" {
		return false
	}
	return strings.TrimSuffix(a, "/") == strings.TrimSuffix(b, "/")
}
