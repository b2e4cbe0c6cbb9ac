package devenv

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
)

// containerImage is the PostgreSQL of the container fallback: the major
// version the tests and field notes use.
const containerImage = "postgres:15-alpine"

// dockerAvailable reports whether testcontainers can reach a Docker engine.
// Without one, testcontainers fails at once; a panic inside it (seen with
// broken Docker contexts) counts as no Docker too.
func dockerAvailable(ctx context.Context) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	provider, err := testcontainers.ProviderDocker.GetProvider()
	if err != nil {
		return false
	}
	defer provider.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return provider.Health(ctx) == nil
}

// startContainer runs PostgreSQL in Docker. The container is new on every
// start (billingd dev migrates and seeds it again) and is removed by stop, or
// by testcontainers' reaper container if billingd dies without stopping it.
func startContainer(ctx context.Context, progress io.Writer) (url string, stop func() error, err error) {
	// testcontainers logs to stdout by default, where the welcome text goes.
	tclog.SetDefault(logTo{progress})
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute) // the first run pulls the image
	defer cancel()
	c, err := tcpostgres.Run(ctx, containerImage,
		tcpostgres.WithDatabase(clusterDatabase), tcpostgres.WithUsername(clusterUser), tcpostgres.WithPassword(rand.Text()),
		tcpostgres.BasicWaitStrategies())
	if err != nil {
		if c != nil {
			_ = c.Terminate(context.WithoutCancel(ctx))
		}
		return "", nil, fmt.Errorf("start PostgreSQL in Docker (testcontainers): %w", err)
	}
	stop = func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return c.Terminate(ctx)
	}
	if url, err = c.ConnectionString(ctx, "sslmode=disable"); err != nil {
		_ = stop()
		return "", nil, fmt.Errorf("PostgreSQL container address: %w", err)
	}
	return url, stop, nil
}

// logTo adapts an io.Writer to testcontainers' logger.
type logTo struct{ w io.Writer }

func (l logTo) Printf(format string, args ...any) {
	fmt.Fprintf(l.w, "testcontainers: "+format+"\n", args...)
}
