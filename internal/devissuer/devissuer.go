// Package devissuer is a minimal OAuth token issuer for development and tests
// only. It must never be exposed as a production authorization server: it
// mints any token it is asked to, with no client authentication, and keeps its
// signing keys in process memory.
//
// An Issuer serves what a resource server needs to verify its tokens — the
// authorization server metadata (RFC 8414), the OpenID configuration and a
// JWKS — and mints signed access tokens on demand.
//
// The issuer URL appears in the metadata and in the iss claim, so it must be
// known before the first request. When the listening address is only known
// after the server starts (httptest, an ephemeral port), create the Issuer with
// an empty URL and set it once the server is up:
//
//	iss, err := devissuer.New("")
//	srv := httptest.NewServer(iss.Handler())
//	iss.SetIssuerURL(srv.URL)
package devissuer

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// DefaultTTL is the lifetime of a minted token when Claims.TTL is zero.
const DefaultTTL = 5 * time.Minute

// DefaultOrgClaim is the claim that carries the org unless Issuer.OrgClaim
// says otherwise; it matches billingd's OAUTH_ORG_CLAIM default.
const DefaultOrgClaim = "org_id"

// Signing algorithms accepted by NewWithAlg.
const (
	AlgES256 = "ES256"
	AlgRS256 = "RS256"
	AlgEdDSA = "EdDSA"
)

// Issuer is an in-memory token issuer. It is safe for concurrent use; set
// OrgClaim before minting concurrently.
type Issuer struct {
	// OrgClaim names the claim that carries Claims.Org. Empty means
	// DefaultOrgClaim.
	OrgClaim string

	alg string

	mu       sync.RWMutex
	url      string
	current  signingKey
	previous *signingKey // the key retired by the last Rotate, still published

	// The OpenID provider part (authorize.go).
	users           []User
	grants          map[string]grant // by authorization code
	defaultAudience string
	// formKey keys the login form's CSRF tokens; crossOrigin refuses
	// cross-site posts of it.
	formKeyOnce sync.Once
	formKey     []byte
	crossOrigin *http.CrossOriginProtection
}

// signingKey is one key pair with the kid it is published under.
type signingKey struct {
	kid    string
	method jwt.SigningMethod
	priv   crypto.Signer
}

// New returns an Issuer that signs with a fresh ECDSA P-256 key (ES256).
// issuerURL may be empty and set later with SetIssuerURL.
func New(issuerURL string) (*Issuer, error) {
	return NewWithAlg(issuerURL, AlgES256)
}

// NewWithAlg is New with a choice of signing algorithm: AlgES256, AlgRS256 or
// AlgEdDSA. Rotate keeps the algorithm.
func NewWithAlg(issuerURL, alg string) (*Issuer, error) {
	key, err := newSigningKey(alg)
	if err != nil {
		return nil, err
	}
	return &Issuer{alg: alg, url: trimURL(issuerURL), current: key, crossOrigin: http.NewCrossOriginProtection()}, nil
}

// SetIssuerURL sets the URL used as the iss claim and as the base of the
// metadata and JWKS addresses. A trailing slash is dropped so that
// "<issuer>/jwks.json" is well formed.
func (i *Issuer) SetIssuerURL(issuerURL string) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.url = trimURL(issuerURL)
}

// IssuerURL is the iss value of minted tokens.
func (i *Issuer) IssuerURL() string {
	i.mu.RLock()
	defer i.mu.RUnlock()
	return i.url
}

// JWKSURL is where Handler serves the JWK Set.
func (i *Issuer) JWKSURL() string {
	return i.IssuerURL() + jwksPath
}

// KeyID is the kid of the current signing key.
func (i *Issuer) KeyID() string {
	i.mu.RLock()
	defer i.mu.RUnlock()
	return i.current.kid
}

// Rotate replaces the signing key with a new one under a new kid. Like a real
// issuer in the middle of a rotation, the JWKS keeps publishing the key just
// retired, so tokens minted before the rotation still verify until they
// expire; the key before that one is dropped.
func (i *Issuer) Rotate() error {
	key, err := newSigningKey(i.alg)
	if err != nil {
		return err
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	old := i.current
	i.previous = &old
	i.current = key
	return nil
}

// PublicKeyPEM is the current public key as a PKIX "PUBLIC KEY" PEM block.
// Tests use it for the algorithm-confusion attack: an HS256 token whose HMAC
// secret is this PEM must be rejected by a verifier.
func (i *Issuer) PublicKeyPEM() []byte {
	i.mu.RLock()
	pub := i.current.priv.Public()
	i.mu.RUnlock()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		// Only reachable with a key type this package never generates.
		panic(fmt.Sprintf("devissuer: marshal public key: %v", err))
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

// newSigningKey generates a key pair for alg with a random kid.
func newSigningKey(alg string) (signingKey, error) {
	var (
		priv   crypto.Signer
		method jwt.SigningMethod
		err    error
	)
	switch alg {
	case AlgES256:
		priv, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		method = jwt.SigningMethodES256
	case AlgRS256:
		priv, err = rsa.GenerateKey(rand.Reader, 2048)
		method = jwt.SigningMethodRS256
	case AlgEdDSA:
		_, priv, err = ed25519.GenerateKey(rand.Reader)
		method = jwt.SigningMethodEdDSA
	default:
		return signingKey{}, fmt.Errorf("devissuer: unsupported algorithm %q", alg)
	}
	if err != nil {
		return signingKey{}, fmt.Errorf("devissuer: generate %s key: %w", alg, err)
	}
	// rand.Text carries more than 128 random bits: kids never collide.
	return signingKey{kid: rand.Text(), method: method, priv: priv}, nil
}

func trimURL(u string) string {
	return strings.TrimRight(u, "/")
}
