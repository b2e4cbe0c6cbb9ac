package testenv

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

var stripeMock struct {
	once sync.Once
	url  string
	err  error
}

// StripeMock returns the URL of a stripe-mock server: STRIPE_MOCK_URL if set,
// otherwise one started once per test process from the stripe-mock binary on
// PATH or in $GOPATH/bin (make test installs it), bound to loopback.
func StripeMock(t testing.TB) string {
	t.Helper()
	stripeMock.once.Do(func() {
		if u := os.Getenv("STRIPE_MOCK_URL"); u != "" {
			stripeMock.url = u
			return
		}
		stripeMock.url, stripeMock.err = startStripeMock()
	})
	if stripeMock.err != nil {
		missing(t, "no stripe-mock (go install github.com/stripe/stripe-mock@v0.190.0, or set STRIPE_MOCK_URL): %v", stripeMock.err)
	}
	return stripeMock.url
}

// StripeMockBinary returns the path of the stripe-mock binary, for tests of
// programs that start stripe-mock themselves (billingd dev).
func StripeMockBinary(t testing.TB) string {
	t.Helper()
	bin, err := findStripeMock()
	if err != nil {
		missing(t, "no stripe-mock (go install github.com/stripe/stripe-mock@v0.190.0, or make tools): %v", err)
	}
	return bin
}

func startStripeMock() (string, error) {
	bin, err := findStripeMock()
	if err != nil {
		return "", err
	}
	httpPort, err := freePort()
	if err != nil {
		return "", err
	}
	httpsPort, err := freePort()
	if err != nil {
		return "", err
	}
	cmd := exec.Command(bin,
		"-http-addr", fmt.Sprintf("127.0.0.1:%d", httpPort),
		"-https-addr", fmt.Sprintf("127.0.0.1:%d", httpsPort))
	// Dies with the test process, so no run leaves a stray server behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("start %s: %w", bin, err)
	}
	url := fmt.Sprintf("http://127.0.0.1:%d", httpPort)
	if err := waitHTTP(url+"/v1/customers", 30*time.Second); err != nil {
		_ = cmd.Process.Kill()
		return "", err
	}
	return url, nil
}

func findStripeMock() (string, error) {
	if p, err := exec.LookPath("stripe-mock"); err == nil {
		return p, nil
	}
	for _, dir := range []string{os.Getenv("GOBIN"), filepath.Join(goPath(), "bin")} {
		p := filepath.Join(dir, "stripe-mock")
		if dir != "" {
			if _, err := os.Stat(p); err == nil {
				return p, nil
			}
		}
	}
	return "", fmt.Errorf("stripe-mock binary not found on PATH or in $GOPATH/bin")
}

func goPath() string {
	if p := os.Getenv("GOPATH"); p != "" {
		return filepath.SplitList(p)[0]
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, "go")
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// waitHTTP polls url until it answers at all (any status).
func waitHTTP(url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not answer within %s: %w", url, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
