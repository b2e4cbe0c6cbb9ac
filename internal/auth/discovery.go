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

// discoverJWKSURL finds the issuer's jwks_uri by trying each metadata address
// in turn. The first document that answers decides: if it names another
// issuer, discovery fails rather than trust keys from a different authority
// (RFC 8414 §3.3).
func discoverJWKSURL(ctx context.Context, client *http.Client, issuer string) (string, error) {
	candidates, err := metadataURLs(issuer)
	if err != nil {
		return "", err
	}
	var errs []error
	for _, u := range candidates {
		md, err := fetchMetadata(ctx, client, u)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", u, err))
			continue
		}
		if !sameIssuer(md.Issuer, issuer) {
			return "", fmt.Errorf("auth: metadata at %s names issuer %q, not %q", u, md.Issuer, issuer)
		}
		if err := checkHTTPURL(md.JWKSURI); err != nil {
			return "", fmt.Errorf("auth: metadata at %s: jwks_uri: %w", u, err)
		}
		return md.JWKSURI, nil
	}
	return "", fmt.Errorf("auth: discover JWKS of issuer %s: %w", issuer, errors.Join(errs...))
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

// sameIssuer compares issuer identifiers, tolerating only a trailing slash:
// operators write OAUTH_ISSUER with or without one, and both name the same
// authority. Tokens are still checked against Config.Issuer exactly.
func sameIssuer(a, b string) bool {
	return strings.TrimSuffix(a, "/") == strings.TrimSuffix(b, "/")
}
