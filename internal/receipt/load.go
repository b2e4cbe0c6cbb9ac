package receipt

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"

	"github.com/go-jose/go-jose/v4"
)

// PublicKeyStore is where a process without key files registers the public
// half of the key it generated, so that every replica publishes every
// replica's key and a receipt or checkpoint of any replica verifies. Only
// public keys are stored: whoever reads the database cannot sign.
type PublicKeyStore interface {
	// RegisterReceiptKey records a public key, a JWK, under its key id.
	RegisterReceiptKey(ctx context.Context, kid string, jwk []byte) error
	// ReceiptPublicKeys returns every registered public key (JWKs).
	ReceiptPublicKeys(ctx context.Context) ([][]byte, error)
	// RetireStoredPrivateKeys replaces each private key an older billingd
	// stored (PEM) with its public half, as toPublic gives it, in one
	// transaction: receipts signed with it still verify, and nothing in
	// the database signs any more.
	RetireStoredPrivateKeys(ctx context.Context, toPublic func(pem []byte) (kid string, jwk []byte, err error)) error
}

// Set is the keys of a process: the ones it signs with, and the ones it
// publishes at /.well-known/jwks.json.
type Set struct {
	*Keys
	// registered: publish every key in the store, not only this
	// process's (no key files).
	registered PublicKeyStore
}

// Load returns the keys of the PEM files at paths, newest first; with no
// paths, a key generated in memory for this process, whose public half it
// registers in store. Either way it first retires any private key an older
// billingd stored in the database.
//
// With key files, only their keys are published, never the keys registered
// in the database: whoever can write the database could register a key of
// their own and sign with it. The generated key is for test mode only (the
// caller refuses it with a live Stripe key).
func Load(ctx context.Context, paths []string, store PublicKeyStore) (*Set, error) {
	if store != nil {
		if err := store.RetireStoredPrivateKeys(ctx, publicJWK); err != nil {
			return nil, fmt.Errorf("retire stored receipt keys: %w", err)
		}
	}
	if len(paths) == 0 {
		return generated(ctx, store)
	}
	signers := make([]Signer, 0, len(paths))
	for _, p := range paths {
		s, err := fileSigner(p)
		if err != nil {
			return nil, fmt.Errorf("RECEIPT_SIGNING_KEYS: %w", err)
		}
		signers = append(signers, s)
	}
	keys, err := NewKeys(signers...)
	if err != nil {
		return nil, fmt.Errorf("RECEIPT_SIGNING_KEYS: %w", err)
	}
	return &Set{Keys: keys}, nil
}

// fileSigner is the Signer of the PEM file at path.
func fileSigner(path string) (Signer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	key, err := ParsePrivateKeyPEM(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return KeySigner(key)
}

// generated makes this process's in-memory key and registers its public
// half.
func generated(ctx context.Context, store PublicKeyStore) (*Set, error) {
	if store == nil {
		return nil, fmt.Errorf("receipt keys: no RECEIPT_SIGNING_KEYS and no store to publish a generated key")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate receipt key: %w", err)
	}
	signer, err := KeySigner(key)
	if err != nil {
		return nil, err
	}
	keys, err := NewKeys(signer)
	if err != nil {
		return nil, err
	}
	pub := keys.public.Keys[0]
	data, err := pub.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("encode receipt key: %w", err)
	}
	if err := store.RegisterReceiptKey(ctx, pub.KeyID, data); err != nil {
		return nil, fmt.Errorf("register receipt key: %w", err)
	}
	return &Set{Keys: keys, registered: store}, nil
}

// Published is the key set served at /.well-known/jwks.json: the key
// files' keys, or, without key files, every key registered by any replica
// (public keys only; anything else in the store is skipped).
func (s *Set) Published(ctx context.Context) (jose.JSONWebKeySet, error) {
	if s.registered == nil {
		return s.public, nil
	}
	stored, err := s.registered.ReceiptPublicKeys(ctx)
	if err != nil {
		return jose.JSONWebKeySet{}, fmt.Errorf("read receipt keys: %w", err)
	}
	var set jose.JSONWebKeySet
	for _, data := range stored {
		var k jose.JSONWebKey
		if err := k.UnmarshalJSON(data); err != nil || !k.IsPublic() {
			continue
		}
		set.Keys = append(set.Keys, k)
	}
	return set, nil
}

// publicJWK is the key id and public JWK of a stored PEM private key.
func publicJWK(pemData []byte) (string, []byte, error) {
	key, err := ParsePrivateKeyPEM(pemData)
	if err != nil {
		return "", nil, err
	}
	s, err := KeySigner(key)
	if err != nil {
		return "", nil, err
	}
	pub, err := publicKeyOf(s)
	if err != nil {
		return "", nil, err
	}
	data, err := json.Marshal(pub)
	return pub.KeyID, data, err
}
