package webhooks

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// TestSignSpecVector signs the Standard Webhooks specification's published
// test vector (its Go library's TestWebhookSign) and must get its
// signature.
func TestSignSpecVector(t *testing.T) {
	got, err := Sign([]string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, "msg_p5jXN8AQM9LWM0D4loKWxJek",
		time.Unix(1614265330, 0), []byte(`{"test": 2432232314}`))
	if err != nil {
		t.Fatal(err)
	}
	if want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Fatalf("signature %s, want the specification's %s", got, want)
	}
}

// TestSignVerifiedBySpecLibrary: what billingd signs, the specification's
// own verifier accepts, under each secret of a rotation; with any other
// secret or body it refuses.
func TestSignVerifiedBySpecLibrary(t *testing.T) {
	current, previous := NewSecret(), NewSecret()
	if !strings.HasPrefix(current, "whsec_") || current == previous {
		t.Fatalf("secrets %q %q", current, previous)
	}
	body := []byte(`{"id":"evt_1","type":"approval.requested"}`)
	now := time.Now()
	sig, err := Sign([]string{current, previous}, "evt_1", now, body)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(strings.Fields(sig)); n != 2 {
		t.Fatalf("want two space-separated signatures during a rotation, got %q", sig)
	}
	headers := http.Header{}
	headers.Set("webhook-id", "evt_1")
	headers.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
	headers.Set("webhook-signature", sig)
	for _, secret := range []string{current, previous} {
		wh, err := standardwebhooks.NewWebhook(secret)
		if err != nil {
			t.Fatal(err)
		}
		if err := wh.Verify(body, headers); err != nil {
			t.Fatalf("the specification's verifier refused: %v", err)
		}
		if err := wh.Verify([]byte(`{"id":"evt_2"}`), headers); err == nil {
			t.Fatal("a changed body verified")
		}
	}
	other, _ := standardwebhooks.NewWebhook(NewSecret())
	if err := other.Verify(body, headers); err == nil {
		t.Fatal("another secret verified")
	}
}
