package devenv

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"

	"github.com/jackc/pgx/v5"
)

// The private cluster's superuser and the databases billingd uses in it:
// one per kind of Stripe, since the ids a database holds are only good
// with the Stripe that issued them. stripe-mock accepts any id, so its
// database is the one of earlier versions.
const (
	clusterUser         = "postgres"
	clusterDatabase     = "billingd"
	clusterFakeDatabase = "billingd_stripefake"
)

// errNoPostgres means no PostgreSQL server binaries were found.
var errNoPostgres = errors.New("no PostgreSQL server binaries (initdb, postgres) on PATH, in /usr/lib/postgresql/*/bin or in Homebrew's postgresql@*")

// PostgresBinDir finds a directory holding both initdb and postgres: the one
// initdb on PATH resolves to (a symlink in /usr/local/bin, a linked
// Homebrew formula), else the newest of the versioned directories that
// packages keep off PATH: Debian's and Ubuntu's /usr/lib/postgresql/<ver>/bin
// and Homebrew's keg-only postgresql@<ver>. Tests use it to skip when there
// is none.
func PostgresBinDir() (string, error) {
	var candidates []string
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			candidates = append(candidates, filepath.Dir(real))
		}
	}
	candidates = append(candidates, versionedBinDirs()...)
	for _, dir := range candidates {
		if isExecutable(filepath.Join(dir, "initdb")) && isExecutable(filepath.Join(dir, "postgres")) {
			return dir, nil
		}
	}
	return "", errNoPostgres
}

// versionedBinDirs lists the versioned PostgreSQL bin directories, newest
// version first.
func versionedBinDirs() []string {
	var dirs []string
	for _, pattern := range []string{"/usr/lib/postgresql/*/bin", "/opt/homebrew/opt/postgresql@*/bin", "/usr/local/opt/postgresql@*/bin"} {
		matches, _ := filepath.Glob(pattern)
		dirs = append(dirs, matches...)
	}
	return newestFirst(dirs)
}

// newestFirst sorts <...>/<version>/bin and <...>/postgresql@<version>/bin
// directories by version, numerically (15 before 9.6), newest first.
func newestFirst(dirs []string) []string {
	version := func(dir string) float64 {
		name := filepath.Base(filepath.Dir(dir)) // "15", "9.6", "postgresql@16"
		v, _ := strconv.ParseFloat(name[strings.LastIndexByte(name, '@')+1:], 64)
		return v
	}
	slices.SortStableFunc(dirs, func(a, b string) int { return cmp.Compare(version(b), version(a)) })
	return dirs
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// cluster is a private PostgreSQL cluster: its data directory, the password
// of its superuser and who runs its processes.
type cluster struct {
	binDir   string
	home     string // holds the data directory and the password: the dev directory, or rootHome's
	dataDir  string // <home>/pg
	pwFile   string // <home>/pg.password
	logPath  string // <dev directory>/postgres.log
	owner    *syscall.Credential
	password string
	settings []string // extra "name=value" server settings, passed as -c
}

// newCluster prepares the cluster of the dev directory dir: the data
// directory (initialised on first use) and its password. As a normal user
// both live in dir; as root, in a directory of their own that the postgres
// user owns (rootHome).
func newCluster(binDir, dir string) (*cluster, error) {
	owner, err := clusterOwner()
	if err != nil {
		return nil, err
	}
	// initdb and postgres run in the data directory: relative paths would
	// not resolve there.
	if dir, err = filepath.Abs(dir); err != nil {
		return nil, err
	}
	home := dir
	if owner != nil {
		if home, err = rootHome(dir, owner); err != nil {
			return nil, err
		}
	}
	c := &cluster{binDir: binDir, home: home, dataDir: filepath.Join(home, "pg"), pwFile: filepath.Join(home, "pg.password"),
		logPath: filepath.Join(dir, "postgres.log"), owner: owner}
	if c.password, err = c.readOrCreatePassword(); err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(c.dataDir, "PG_VERSION")); err == nil {
		return c, nil
	}
	return c, c.initdb()
}

// clusterOwner is who runs initdb and postgres: the current user, except for
// root, as which both refuse to run; root hands them to the postgres user
// that distribution packages create.
func clusterOwner() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, errors.New("running as root: initdb and postgres refuse to run as root, and there is no postgres user to run them as; run billingd dev as a normal user, or set DATABASE_URL")
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("user postgres: %w", err)
	}
	// An empty Groups drops root's supplementary groups.
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
}

// rootHome is where root's cluster for the dev directory dir (absolute)
// lives: the postgres user that runs it must reach it, and a checkout
// under /root or a mktemp -d directory (mode 700) is out of its reach. So
// the cluster goes to <base>/<checkout>-<hash of dir>, one per checkout,
// owned by postgres, where base is /var/lib/billingd-dev (kept across
// reboots), else billingd-dev in the temporary directory. Both levels are
// checked, not trusted: base must be root's alone, and the cluster's
// directory postgres's alone, so that no other user can have planted a
// directory or a symbolic link there.
func rootHome(dir string, owner *syscall.Credential) (string, error) {
	base := filepath.Join(os.TempDir(), "billingd-dev")
	if fi, err := os.Stat("/var/lib"); err == nil && fi.IsDir() {
		base = "/var/lib/billingd-dev"
	}
	if err := ensurePrivateDir(base, 0o755, &syscall.Credential{Uid: 0}); err != nil {
		return "", err
	}
	home := filepath.Join(base, homeName(dir))
	if err := ensurePrivateDir(home, 0o700, owner); err != nil {
		return "", err
	}
	if err := checkReachable(home, owner); err != nil {
		return "", err
	}
	// Says whose cluster this is, for whoever cleans up base one day.
	if err := os.WriteFile(filepath.Join(home, "checkout"), []byte(filepath.Dir(dir)+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("write %s: %w", filepath.Join(home, "checkout"), err)
	}
	return home, nil
}

// homeName names the cluster directory of the dev directory dir: the
// checkout's name, for people, and a hash of dir's path, so that two
// checkouts of the same name get a cluster each.
func homeName(dir string) string {
	sum := sha256.Sum256([]byte(dir))
	name := strings.Map(func(r rune) rune {
		if r < 128 && (unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_' || r == '.') {
			return r
		}
		return '_'
	}, filepath.Base(filepath.Dir(dir)))
	if len(name) > 40 {
		name = name[:40]
	}
	return strings.TrimLeft(name, ".") + "-" + hex.EncodeToString(sum[:6])
}

// ensurePrivateDir creates path with perm, owned by owner, unless it
// exists; either way, path must then be a directory (not a symbolic link)
// that owner owns and no one else can write to.
func ensurePrivateDir(path string, perm os.FileMode, owner *syscall.Credential) error {
	switch err := os.Mkdir(path, perm); {
	case err == nil:
		if err := os.Chown(path, int(owner.Uid), int(owner.Gid)); err != nil {
			return fmt.Errorf("hand %s to uid %d: %w", path, owner.Uid, err)
		}
	case !errors.Is(err, fs.ErrExist):
		return fmt.Errorf("create %s: %w", path, err)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok || st.Uid != owner.Uid || fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%s must be a directory owned by uid %d that no one else can write to; remove it and run billingd dev again", path, owner.Uid)
	}
	return nil
}

// checkReachable fails early, with advice, when owner cannot enter dir (an
// absolute path) and every directory above it: initdb would fail with a
// bare "Permission denied".
func checkReachable(dir string, owner *syscall.Credential) error {
	for p := dir; ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		if !canEnter(fi, owner) {
			return fmt.Errorf("running as root: the PostgreSQL cluster runs as user postgres, which cannot enter %s; "+
				"make it searchable (chmod o+x %s), or set DATABASE_URL", p, p)
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
}

func canEnter(fi os.FileInfo, who *syscall.Credential) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return true
	}
	mode := fi.Mode().Perm()
	switch {
	case st.Uid == who.Uid:
		return mode&0o100 != 0
	case st.Gid == who.Gid:
		return mode&0o010 != 0
	default:
		return mode&0o001 != 0
	}
}

// readOrCreatePassword returns the superuser's password, kept next to the
// data directory so that every start can connect. The cluster asks for it
// (scram-sha-256) because its port is open to every user of the machine.
func (c *cluster) readOrCreatePassword() (string, error) {
	data, err := os.ReadFile(c.pwFile)
	switch {
	case err == nil:
		return strings.TrimSpace(string(data)), nil
	case !errors.Is(err, os.ErrNotExist):
		return "", fmt.Errorf("read the cluster password: %w", err)
	}
	if _, err := os.Stat(c.dataDir); err == nil {
		return "", fmt.Errorf("%s exists but its password file %s is gone: remove %s to start a new cluster", c.dataDir, c.pwFile, c.dataDir)
	}
	password := rand.Text() // 26 characters of base32: safe in a URL as is
	if err := os.WriteFile(c.pwFile, []byte(password+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write the cluster password: %w", err)
	}
	// initdb reads it as the cluster's owner.
	return password, c.chown(c.pwFile)
}

func (c *cluster) chown(path string) error {
	if c.owner == nil {
		return nil
	}
	return os.Chown(path, int(c.owner.Uid), int(c.owner.Gid))
}

// initdb creates the cluster. The C locale keeps it independent of the
// locales installed on the machine.
func (c *cluster) initdb() error {
	if err := os.MkdirAll(c.dataDir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", c.dataDir, err)
	}
	if err := c.chown(c.dataDir); err != nil {
		return fmt.Errorf("hand %s to user postgres: %w", c.dataDir, err)
	}
	cmd := exec.Command(filepath.Join(c.binDir, "initdb"), "-D", c.dataDir, "-U", clusterUser,
		"--pwfile="+c.pwFile, "--auth=scram-sha-256", "--encoding=UTF8", "--locale=C")
	cmd.Dir = c.dataDir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.owner}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb %s: %w\n%s", c.dataDir, err, out)
	}
	return nil
}

// start runs the postmaster as a child of billingd, listening on a free
// loopback port and on no unix socket (its path could exceed the 107-byte
// limit in a deep working tree). pg_ctl start is not used because it
// detaches the server, which would then outlive a billingd killed with
// SIGKILL; as a child it gets SIGINT (fast shutdown) from the kernel instead.
//
// It returns the URL of database, which it creates unless it exists, or
// anew when fresh.
func (c *cluster) start(ctx context.Context, database string, fresh bool) (*process, string, error) {
	port, err := freeLoopbackPort()
	if err != nil {
		return nil, "", err
	}
	return c.startOn(ctx, port, database, fresh)
}

// startOn is start on the given port.
func (c *cluster) startOn(ctx context.Context, port int, database string, fresh bool) (*process, string, error) {
	args := []string{"-D", c.dataDir, "-p", strconv.Itoa(port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="}
	for _, setting := range c.settings {
		args = append(args, "-c", setting)
	}
	cmd := exec.Command(filepath.Join(c.binDir, "postgres"), args...)
	cmd.Dir = c.dataDir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.owner}
	proc, err := startProcess("postgres", cmd, c.logPath, syscall.SIGINT)
	if err != nil {
		return nil, "", err
	}
	admin := c.url(port, "postgres")
	if err := proc.waitUntil(ctx, func(ctx context.Context) error { return ping(ctx, admin) }, time.Minute); err != nil {
		_ = stopPostgres(proc)
		return nil, "", err
	}
	if err := ensureDatabase(ctx, admin, database, fresh); err != nil {
		_ = stopPostgres(proc)
		return nil, "", err
	}
	return proc, c.url(port, database), nil
}

func (c *cluster) url(port int, database string) string {
	u := url.URL{Scheme: "postgres", User: url.UserPassword(clusterUser, c.password),
		Host: fmt.Sprintf("127.0.0.1:%d", port), Path: "/" + database, RawQuery: "sslmode=disable"}
	return u.String()
}

// stopPostgres asks for a fast shutdown (SIGINT: disconnect clients, write a
// checkpoint), the same as pg_ctl stop -m fast.
func stopPostgres(p *process) error {
	return p.stop(syscall.SIGINT, 30*time.Second)
}

func ping(ctx context.Context, databaseURL string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return err
	}
	return conn.Close(ctx)
}

// ensureDatabase creates the named database unless it exists; when fresh,
// it drops it first.
func ensureDatabase(ctx context.Context, adminURL, name string, fresh bool) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("connect to the dev cluster: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if fresh {
		if _, err := conn.Exec(ctx, `DROP DATABASE IF EXISTS `+pgx.Identifier{name}.Sanitize()); err != nil {
			return fmt.Errorf("drop database %s: %w", name, err)
		}
	}
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return fmt.Errorf("look for database %s: %w", name, err)
	}
	if exists {
		return nil
	}
	if _, err := conn.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}

// Postgres is a private cluster run as a child process, for a test that
// needs a PostgreSQL of its own to restart (the failpoint sweep): the same
// cluster billingd dev runs, in a directory of the test's.
type Postgres struct {
	c        *cluster
	proc     *process
	port     int
	database string
	url      string
}

// StartPostgres initialises the private cluster of dir (once) and runs it
// with database in it. settings are extra server settings ("name=value",
// as postgres -c takes them), kept across Restart: make bench's cluster
// preloads pg_stat_statements, for one.
func StartPostgres(ctx context.Context, dir, database string, settings ...string) (*Postgres, error) {
	binDir, err := PostgresBinDir()
	if err != nil {
		return nil, err
	}
	c, err := newCluster(binDir, dir)
	if err != nil {
		return nil, err
	}
	c.settings = settings
	port, err := freeLoopbackPort()
	if err != nil {
		return nil, err
	}
	p := &Postgres{c: c, port: port, database: database}
	if p.proc, p.url, err = c.startOn(ctx, port, database, true); err != nil {
		return nil, err
	}
	return p, nil
}

// URL is the database's URL.
func (p *Postgres) URL() string { return p.url }

// Pid is the server's postmaster: every backend is its child.
func (p *Postgres) Pid() int { return p.proc.cmd.Process.Pid }

// Restart stops the server as an operator's restart does (a fast shutdown:
// every connection is cut, transactions in flight are rolled back) and
// starts it again on the same port.
func (p *Postgres) Restart(ctx context.Context) error {
	if err := stopPostgres(p.proc); err != nil {
		return fmt.Errorf("stop PostgreSQL: %w", err)
	}
	proc, _, err := p.c.startOn(ctx, p.port, p.database, false)
	if err != nil {
		return fmt.Errorf("start PostgreSQL again: %w", err)
	}
	p.proc = proc
	return nil
}

// Stop stops the server.
func (p *Postgres) Stop() error { return stopPostgres(p.proc) }

// Remove stops the server and deletes the cluster: its data directory and,
// as root, the directory of its own it was given (rootHome), which is not
// below the test's directory.
func (p *Postgres) Remove() error {
	err := p.Stop()
	if rmErr := os.RemoveAll(p.c.home); err == nil {
		err = rmErr
	}
	return err
}
