package devissuer_test

import (
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/billingd/billingd/internal/devissuer"
)

// authRequest is a valid authorization request of a loopback client.
func authRequest(state string) url.Values {
	return url.Values{"response_type": {"code"}, "client_id": {"billingd-dev-pages"},
		"redirect_uri": {"http://127.0.0.1:8080/auth/callback"}, "state": {state}, "nonce": {"n-" + state},
		"code_challenge": {"E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"}, "code_challenge_method": {"S256"}}
}

// send makes a request to the issuer with the given Host header and
// headers, without following redirects.
func send(t *testing.T, method, target, host string, form url.Values, header map[string]string) (*http.Response, string) {
	t.Helper()
	var body io.Reader
	if method == http.MethodPost {
		body = strings.NewReader(form.Encode())
	} else if form != nil {
		target += "?" + form.Encode()
	}
	req, err := http.NewRequest(method, target, body)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp, string(data)
}

var csrfField = regexp.MustCompile(`name="csrf_token" value="([^"]+)"`)

// TestAuthorizeRefusesRebindingAndForgedForms: the development issuer's
// login (which signs anyone in as any demo user) answers only requests
// whose Host is its own or a loopback name, so a DNS-rebound page cannot
// drive it, and chooses a user only from its own page's form: a post
// without that page's token for this very request, or a cross-site one, is
// refused and issues no code.
func TestAuthorizeRefusesRebindingAndForgedForms(t *testing.T) {
	iss, err := devissuer.New("")
	if err != nil {
		t.Fatal(err)
	}
	srv := start(t, iss, "")
	iss.SetUsers(devissuer.User{Subject: "ada", Org: "o", Scopes: []string{"billing:read"}})
	_, port, _ := strings.Cut(strings.TrimPrefix(srv.URL, "http://"), ":")
	authorize := srv.URL + "/authorize"

	for _, host := range []string{"rebind.evil.example:" + port, "evil.example", "127.0.0.1.evil.example:" + port, "localhost.evil.example:" + port} {
		for _, method := range []string{http.MethodGet, http.MethodPost} {
			form := authRequest("s1")
			form.Set("user", "ada")
			resp, _ := send(t, method, authorize, host, form, nil)
			if resp.StatusCode != http.StatusMisdirectedRequest || resp.Header.Get("Location") != "" {
				t.Errorf("%s /authorize with Host %s: %d, Location %q", method, host, resp.StatusCode, resp.Header.Get("Location"))
			}
		}
	}
	for _, host := range []string{"localhost:" + port, "127.0.0.1:" + port, "127.0.0.2:" + port, "[::1]:" + port} {
		if resp, _ := send(t, http.MethodGet, authorize, host, authRequest("s1"), nil); resp.StatusCode != http.StatusOK {
			t.Errorf("GET /authorize with Host %s: %d", host, resp.StatusCode)
		}
	}

	resp, page := send(t, http.MethodGet, authorize, "", authRequest("s1"), nil)
	m := csrfField.FindStringSubmatch(page)
	if resp.StatusCode != http.StatusOK || m == nil {
		t.Fatalf("login page: %d, no csrf_token field", resp.StatusCode)
	}
	token := m[1]
	_, other := send(t, http.MethodGet, authorize, "", authRequest("s2"), nil)
	otherToken := csrfField.FindStringSubmatch(other)[1]

	for _, forged := range []struct {
		name   string
		token  string
		header map[string]string
	}{
		{"no token", "", nil},
		{"a made-up token", "AAAA", nil},
		{"another request's token", otherToken, nil},
		{"cross-site, with the token", token, map[string]string{"Sec-Fetch-Site": "cross-site"}},
		{"another origin, with the token", token, map[string]string{"Origin": "http://evil.example"}},
	} {
		form := authRequest("s1")
		form.Set("user", "ada")
		if forged.token != "" {
			form.Set("csrf_token", forged.token)
		}
		resp, _ := send(t, http.MethodPost, authorize, "", form, forged.header)
		if resp.StatusCode != http.StatusForbidden || resp.Header.Get("Location") != "" {
			t.Errorf("%s: %d, Location %q", forged.name, resp.StatusCode, resp.Header.Get("Location"))
		}
	}

	form := authRequest("s1")
	form.Set("user", "ada")
	form.Set("csrf_token", token)
	resp, _ = send(t, http.MethodPost, authorize, "", form, map[string]string{"Sec-Fetch-Site": "same-origin"})
	loc, _ := url.Parse(resp.Header.Get("Location"))
	if resp.StatusCode != http.StatusSeeOther || loc == nil || loc.Query().Get("code") == "" || loc.Query().Get("state") != "s1" {
		t.Fatalf("the login page's own form: %d, Location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
}
