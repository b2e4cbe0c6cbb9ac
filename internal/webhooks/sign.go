package webhooks

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"time"
)

// secretPrefix marks a Standard Webhooks secret; the rest is its key in
// base64.
const secretPrefix = "whsec_"

// NewSecret returns a new signing secret: 32 random bytes, whsec_-prefixed
// base64, as the Standard Webhooks specification writes them.
func NewSecret() string {
	key := make([]byte, 32)
	_, _ = rand.Read(key) // never fails (crypto/rand)
	return secretPrefix + base64.StdEncoding.EncodeToString(key)
}

// Sign returns the webhook-signature header for a message: one
// "v1,<base64 HMAC-SHA256 of id.timestamp.body>" per secret, separated by
// spaces (several during a rotation). The signing code is this: the
// specification's Go library (standard-webhooks/libraries, v0.0.1) signs
// the same way but is one early release; the tests check this against the
// specification's vectors and that library's verifier.
func Sign(secrets []string, msgID string, timestamp time.Time, body []byte) (string, error) {
	sigs := make([]string, 0, len(secrets))
	for _, secret := range secrets {
		key, err := secretKey(secret)
		if err != nil {
			return "", err
		}
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(msgID + "." + strconv.FormatInt(timestamp.Unix(), 10) + "."))
		mac.Write(body)
		sigs = append(sigs, "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	}
	return strings.Join(sigs, " "), nil
}

// secretKey is the key of a whsec_ secret.
func secretKey(secret string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, secretPrefix))
	if err != nil || len(key) == 0 {
		return nil, errors.New("webhook secret is not whsec_ and base64")
	}
	return key, nil
}
