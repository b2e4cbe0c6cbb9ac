// Package receipt signs and verifies billingd's receipts: compact JWS
// (ES256 for P-256 keys, EdDSA for Ed25519 keys) over billing.ReceiptClaims,
// with go-jose. It also loads the signing keys — PEM files named by
// RECEIPT_SIGNING_KEYS, or one key generated once and shared by every replica
// through the database — and publishes their public halves as a JWKS.
package receipt

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"

	"github.com/go-jose/go-jose/v4"

	"github.com/billingd/billingd/billing"
)

// Type is the JWS "typ" header of a receipt.
const Type = "billingd-receipt+jwt"

// Algorithms a receipt may be signed with: asymmetric only.
var Algorithms = []jose.SignatureAlgorithm{jose.ES256, jose.EdDSA}

// Keys is a receipt key set: the first key signs; every key, the older ones
// included, is published so that receipts signed before a rotation still
// verify.
type Keys struct {
	signer jose.Signer
	public jose.JSONWebKeySet
}

var _ billing.ReceiptSigner = (*Keys)(nil)

// NewKeys builds a key set from private keys, newest first.
func NewKeys(private ...crypto.Signer) (*Keys, error) {
	if len(private) == 0 {
		return nil, errors.New("receipt keys: none given")
	}
	k := &Keys{}
	for i, priv := range private {
		alg, err := algorithmOf(priv)
		if err != nil {
			return nil, err
		}
		pub := jose.JSONWebKey{Key: priv.Public(), Algorithm: string(alg), Use: "sig"}
		thumb, err := pub.Thumbprint(crypto.SHA256)
		if err != nil {
			return nil, fmt.Errorf("receipt key thumbprint: %w", err)
		}
		pub.KeyID = base64.RawURLEncoding.EncodeToString(thumb)
		for _, seen := range k.public.Keys {
			if seen.KeyID == pub.KeyID {
				return nil, errors.New("receipt keys: the same key is listed twice")
			}
		}
		k.public.Keys = append(k.public.Keys, pub)
		if i == 0 {
			k.signer, err = jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: jose.JSONWebKey{Key: priv, KeyID: pub.KeyID}},
				(&jose.SignerOptions{}).WithType(Type))
			if err != nil {
				return nil, fmt.Errorf("receipt signer: %w", err)
			}
		}
	}
	return k, nil
}

func algorithmOf(key crypto.Signer) (jose.SignatureAlgorithm, error) {
	switch k := key.(type) {
	case *ecdsa.PrivateKey:
		if k.Curve != elliptic.P256() {
			return "", errors.New("receipt keys: an ECDSA key must be on P-256 (ES256)")
		}
		return jose.ES256, nil
	case ed25519.PrivateKey:
		return jose.EdDSA, nil
	default:
		return "", fmt.Errorf("receipt keys: %T is not supported: use P-256 (ES256) or Ed25519 (EdDSA)", key)
	}
}

// SignReceipt implements billing.ReceiptSigner.
func (k *Keys) SignReceipt(c billing.ReceiptClaims) (string, error) {
	payload, err := json.Marshal(c)
	if err != nil {
		return "", fmt.Errorf("encode receipt: %w", err)
	}
	jws, err := k.signer.Sign(payload)
	if err != nil {
		return "", fmt.Errorf("sign receipt: %w", err)
	}
	return jws.CompactSerialize()
}

// JWKS is the public key set, as served at /.well-known/jwks.json.
func (k *Keys) JWKS() jose.JSONWebKeySet { return k.public }

// Verify checks a receipt's signature against set and returns its claims.
func Verify(receipt string, set jose.JSONWebKeySet) (billing.ReceiptClaims, error) {
	jws, err := jose.ParseSignedCompact(receipt, Algorithms)
	if err != nil {
		return billing.ReceiptClaims{}, fmt.Errorf("receipt is not a compact JWS: %w", err)
	}
	if len(jws.Signatures) != 1 {
		return billing.ReceiptClaims{}, errors.New("receipt must have exactly one signature")
	}
	header := jws.Signatures[0].Protected
	if header.ExtraHeaders[jose.HeaderType] != Type {
		return billing.ReceiptClaims{}, errors.New("not a billingd receipt (typ)")
	}
	keys := set.Key(header.KeyID)
	if len(keys) == 0 {
		return billing.ReceiptClaims{}, fmt.Errorf("receipt key %q is not among the published keys", header.KeyID)
	}
	var payload []byte
	for _, key := range keys {
		if key.Algorithm != "" && key.Algorithm != header.Algorithm {
			continue
		}
		if payload, err = jws.Verify(key); err == nil {
			break
		}
	}
	if payload == nil {
		return billing.ReceiptClaims{}, errors.New("receipt signature does not verify")
	}
	var c billing.ReceiptClaims
	if err := json.Unmarshal(payload, &c); err != nil {
		return billing.ReceiptClaims{}, fmt.Errorf("receipt claims: %w", err)
	}
	return c, nil
}

// ParsePrivateKeyPEM reads a P-256 or Ed25519 private key: PKCS #8
// ("PRIVATE KEY") or SEC 1 ("EC PRIVATE KEY").
func ParsePrivateKeyPEM(data []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("no PEM block found")
	}
	var key any
	var err error
	switch block.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("PEM block %q is not a private key", block.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("parse private key: %w", err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("%T cannot sign", key)
	}
	if _, err := algorithmOf(signer); err != nil {
		return nil, err
	}
	return signer, nil
}

// GenerateKeyPEM makes a new P-256 key as PKCS #8 PEM. P-256 because every
// browser's WebCrypto verifies ES256, so the dashboard can check receipts.
func GenerateKeyPEM() ([]byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}
