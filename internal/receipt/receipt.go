// Package receipt signs and verifies billingd's evidence: receipts (compact
// JWS over billing.ReceiptClaims) and audit checkpoints (compact JWS over
// billing.Checkpoint), ES256 for P-256 keys and EdDSA for Ed25519 keys, with
// go-jose. It also loads the signing keys and publishes their public halves
// as a JWKS.
//
// A key that signs is a Signer: go-jose's OpaqueSigner, so that the private
// key may live in a KMS or an HSM and billingd only asks it to sign. Today
// the keys come from PEM files (RECEIPT_SIGNING_KEYS) or, with a test-mode
// Stripe key only, from a key each process generates in memory. No key that
// signs is ever written to the database (contract §11, key custody).
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
	"slices"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/cryptosigner"

	"github.com/billingd/billingd/billing"
)

// Type is the JWS "typ" header of a receipt.
const Type = "billingd-receipt+jwt"

// CheckpointType is the JWS "typ" header of an audit checkpoint. It differs
// from Type so that neither can be passed off as the other.
const CheckpointType = "billingd-checkpoint+jwt"

// MandateType is the JWS "typ" header of a signed standing mandate
// (contract §13): signed like a receipt, never to be taken for one.
const MandateType = "billingd-mandate+jwt"

// Algorithms a receipt may be signed with: asymmetric only.
var Algorithms = []jose.SignatureAlgorithm{jose.ES256, jose.EdDSA}

// Signer is one signing key, wherever it is kept. It is go-jose's
// OpaqueSigner because that is exactly the shape of a KMS or an HSM: it
// names its public key and algorithms and signs the bytes it is given,
// and the private key never has to leave it. Public().KeyID, when set, is
// the "kid" billingd publishes and puts in every header; when empty,
// billingd uses the key's RFC 7638 thumbprint.
type Signer = jose.OpaqueSigner

// KeySigner is the Signer of a private key held in this process (read
// from a file, or generated in memory): P-256 or Ed25519.
func KeySigner(key crypto.Signer) (Signer, error) {
	if _, err := algorithmOf(key); err != nil {
		return nil, err
	}
	return cryptosigner.Opaque(key), nil
}

// Keys is a receipt key set: the first signer signs; every key, the older
// ones included, is published so that receipts signed before a rotation
// still verify.
type Keys struct {
	receipts    jose.Signer
	checkpoints jose.Signer
	mandates    jose.Signer
	public      jose.JSONWebKeySet
}

var (
	_ billing.ReceiptSigner = (*Keys)(nil)
	_ billing.MandateSigner = (*Keys)(nil)
)

// NewKeys builds a key set from signers, newest first.
func NewKeys(signers ...Signer) (*Keys, error) {
	if len(signers) == 0 {
		return nil, errors.New("receipt keys: none given")
	}
	k := &Keys{}
	for i, s := range signers {
		pub, err := publicKeyOf(s)
		if err != nil {
			return nil, err
		}
		for _, seen := range k.public.Keys {
			if seen.KeyID == pub.KeyID {
				return nil, errors.New("receipt keys: the same key is listed twice")
			}
		}
		k.public.Keys = append(k.public.Keys, pub)
		if i == 0 {
			if k.receipts, err = newSigner(s, pub, Type); err != nil {
				return nil, err
			}
			if k.checkpoints, err = newSigner(s, pub, CheckpointType); err != nil {
				return nil, err
			}
			if k.mandates, err = newSigner(s, pub, MandateType); err != nil {
				return nil, err
			}
		}
	}
	return k, nil
}

// publicKeyOf is the JWK billingd publishes for s: its public key, the
// algorithm it signs with, and its key id.
func publicKeyOf(s Signer) (jose.JSONWebKey, error) {
	pub := *s.Public()
	pub.Use = "sig"
	if pub.Algorithm == "" {
		i := slices.IndexFunc(s.Algs(), func(a jose.SignatureAlgorithm) bool { return slices.Contains(Algorithms, a) })
		if i < 0 {
			return pub, fmt.Errorf("receipt keys: the key signs with %v; use ES256 or EdDSA", s.Algs())
		}
		pub.Algorithm = string(s.Algs()[i])
	}
	if !slices.Contains(Algorithms, jose.SignatureAlgorithm(pub.Algorithm)) {
		return pub, fmt.Errorf("receipt keys: %s is not supported: use ES256 or EdDSA", pub.Algorithm)
	}
	if !pub.IsPublic() {
		return pub, errors.New("receipt keys: a signer published a private key")
	}
	if pub.KeyID == "" {
		thumb, err := pub.Thumbprint(crypto.SHA256)
		if err != nil {
			return pub, fmt.Errorf("receipt key thumbprint: %w", err)
		}
		pub.KeyID = base64.RawURLEncoding.EncodeToString(thumb)
	}
	return pub, nil
}

// withKeyID is a Signer whose public key names the key id billingd chose:
// go-jose writes the header's "kid" from Public().KeyID.
type withKeyID struct {
	Signer
	pub jose.JSONWebKey
}

func (s withKeyID) Public() *jose.JSONWebKey { p := s.pub; return &p }

func newSigner(s Signer, pub jose.JSONWebKey, typ jose.ContentType) (jose.Signer, error) {
	signer, err := jose.NewSigner(
		jose.SigningKey{Algorithm: jose.SignatureAlgorithm(pub.Algorithm), Key: withKeyID{Signer: s, pub: pub}},
		(&jose.SignerOptions{}).WithType(typ))
	if err != nil {
		return nil, fmt.Errorf("receipt signer: %w", err)
	}
	return signer, nil
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
	return sign(k.receipts, c, "receipt")
}

// SignCheckpoint implements billing.ReceiptSigner.
func (k *Keys) SignCheckpoint(c billing.Checkpoint) (string, error) {
	return sign(k.checkpoints, c, "checkpoint")
}

// SignMandate implements billing.MandateSigner.
func (k *Keys) SignMandate(c billing.MandateClaims) (string, error) {
	return sign(k.mandates, c, "mandate")
}

func sign(signer jose.Signer, claims any, what string) (string, error) {
	payload, err := json.Marshal(claims)
	if err != nil {
		return "", fmt.Errorf("encode %s: %w", what, err)
	}
	jws, err := signer.Sign(payload)
	if err != nil {
		return "", fmt.Errorf("sign %s: %w", what, err)
	}
	return jws.CompactSerialize()
}

// JWKS is the public halves of the keys this process signs with.
func (k *Keys) JWKS() jose.JSONWebKeySet { return k.public }

// Verify checks a receipt's signature against set and returns its claims.
func Verify(receipt string, set jose.JSONWebKeySet) (billing.ReceiptClaims, error) {
	var c billing.ReceiptClaims
	return c, verify(receipt, Type, "receipt", set, &c)
}

// VerifyCheckpoint checks an audit checkpoint's signature against set and
// returns its claims.
func VerifyCheckpoint(checkpoint string, set jose.JSONWebKeySet) (billing.Checkpoint, error) {
	var c billing.Checkpoint
	return c, verify(checkpoint, CheckpointType, "checkpoint", set, &c)
}

// VerifyMandate checks a signed mandate against set and returns its
// claims.
func VerifyMandate(mandate string, set jose.JSONWebKeySet) (billing.MandateClaims, error) {
	var c billing.MandateClaims
	return c, verify(mandate, MandateType, "mandate", set, &c)
}

// verify checks that token is a compact JWS of type typ signed by a key of
// set, and decodes its payload into claims.
func verify(token string, typ jose.ContentType, what string, set jose.JSONWebKeySet, claims any) error {
	jws, err := jose.ParseSignedCompact(token, Algorithms)
	if err != nil {
		return fmt.Errorf("%s is not a compact JWS: %w", what, err)
	}
	if len(jws.Signatures) != 1 {
		return fmt.Errorf("%s must have exactly one signature", what)
	}
	header := jws.Signatures[0].Protected
	if header.ExtraHeaders[jose.HeaderType] != string(typ) {
		return fmt.Errorf("not a billingd %s (typ)", what)
	}
	keys := set.Key(header.KeyID)
	if len(keys) == 0 {
		return fmt.Errorf("%s key %q is not among the published keys", what, header.KeyID)
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
		return fmt.Errorf("%s signature does not verify", what)
	}
	if err := json.Unmarshal(payload, claims); err != nil {
		return fmt.Errorf("%s claims: %w", what, err)
	}
	return nil
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
