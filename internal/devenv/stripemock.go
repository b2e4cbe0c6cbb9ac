package devenv

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// StripeMockVersion is the stripe-mock the Makefile installs into
// .tools/stripe-mock@<version>; keep the two in step.
const StripeMockVersion = "v0.190.0"

// stripeMockKey is the API key billingd sends stripe-mock. It accepts any key
// of exactly three underscore-separated parts, sk_test_<anything>, and
// answers 401 to others.
const stripeMockKey = "sk_test_billingddev"

// findStripeMock looks where make puts stripe-mock (.tools, also on make's
// PATH), then on PATH, then where go install puts it.
func findStripeMock() (string, error) {
	candidates := []string{filepath.Join(".tools", "stripe-mock@"+StripeMockVersion, "stripe-mock")}
	if p, err := exec.LookPath("stripe-mock"); err == nil {
		candidates = append(candidates, p)
	}
	if gobin := os.Getenv("GOBIN"); gobin != "" {
		candidates = append(candidates, filepath.Join(gobin, "stripe-mock"))
	}
	candidates = append(candidates, filepath.Join(goPath(), "bin", "stripe-mock"))
	for _, p := range candidates {
		if isExecutable(p) {
			return filepath.Abs(p)
		}
	}
	return "", fmt.Errorf("stripe-mock not found: run make tools (it installs it), or go install github.com/stripe/stripe-mock@%s, or set STRIPE_SECRET_KEY to use Stripe's test mode", StripeMockVersion)
}

func goPath() string {
	if p := os.Getenv("GOPATH"); p != "" {
		return filepath.SplitList(p)[0]
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, "go")
}

// startStripeMock runs stripe-mock on free loopback ports and returns its
// HTTP base URL. It keeps no state, so the kernel may simply kill it
// (SIGKILL) if billingd dies.
func startStripeMock(ctx context.Context, dir string) (*process, string, error) {
	bin, err := findStripeMock()
	if err != nil {
		return nil, "", err
	}
	httpPort, err := freeLoopbackPort()
	if err != nil {
		return nil, "", err
	}
	httpsPort, err := freeLoopbackPort()
	if err != nil {
		return nil, "", err
	}
	cmd := exec.Command(bin, "-http-addr", fmt.Sprintf("127.0.0.1:%d", httpPort), "-https-addr", fmt.Sprintf("127.0.0.1:%d", httpsPort))
	proc, err := startProcess("stripe-mock", cmd, filepath.Join(dir, "stripe-mock.log"), syscall.SIGKILL)
	if err != nil {
		return nil, "", err
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", httpPort)
	if err := proc.waitUntil(ctx, func(ctx context.Context) error { return answers(ctx, base+"/v1/customers") }, 30*time.Second); err != nil {
		_ = stopStripeMock(proc)
		return nil, "", err
	}
	return proc, base, nil
}

func stopStripeMock(p *process) error {
	return p.stop(syscall.SIGTERM, 5*time.Second)
}

// answers reports whether url answers HTTP at all, whatever the status.
func answers(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}
