package main

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// postgresDir holds the SQL billingd runs.
const postgresDir = "../../internal/postgres"

// TestScriptsMirrorBillingdSQL checks the pgbench scripts against the SQL in
// internal/postgres's source: every statement of a script must be one of
// billingd's, and every statement of the store methods a call goes through
// must be in the script. (The bench also checks the scripts against the
// statements billingd actually sends, which catches a method added to the
// hot path; this test catches an edited statement before any run.)
func TestScriptsMirrorBillingdSQL(t *testing.T) {
	byFunc := goStatements(t)
	known := map[string]bool{"begin": true, "commit": true} // storeTx's BEGIN and COMMIT
	for _, stmts := range byFunc {
		for _, s := range stmts {
			known[normalizeSQL(s)] = true
		}
	}
	for _, tc := range []struct {
		script   workload
		required []string // store methods whose statements the script must run
	}{
		{propose, []string{"queueActivity", "AccountForCall", "IssueConfirmation"}},
		{handshake, []string{"queueActivity", "AccountForCall", "IssueConfirmation", "LockByToken", "SaveRecoveryPoint", "queueReceipt", "queueAudit"}},
	} {
		t.Run(string(tc.script), func(t *testing.T) {
			body, err := scripts.ReadFile("scripts/" + string(tc.script) + ".sql")
			if err != nil {
				t.Fatal(err)
			}
			have := map[string]bool{}
			for _, s := range scriptStatements(string(body)) {
				n := normalizeSQL(s)
				have[n] = true
				if !known[n] {
					t.Errorf("the script runs a statement internal/postgres does not have:\n%s", n)
				}
			}
			for _, fn := range tc.required {
				if len(byFunc[fn]) == 0 {
					t.Errorf("no SQL found in %s: renamed?", fn)
				}
				for _, s := range byFunc[fn] {
					if !have[normalizeSQL(s)] {
						t.Errorf("%s runs a statement the script lacks:\n%s", fn, normalizeSQL(s))
					}
				}
			}
		})
	}
}

// goStatements returns, per function or method name, the SQL statements in
// internal/postgres: every constant string expression passed to a call that
// starts like a statement.
func goStatements(t *testing.T) map[string][]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(postgresDir, "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Go files in %s: %v", postgresDir, err)
	}
	fset := token.NewFileSet()
	var parsed []*ast.File
	consts := map[string]ast.Expr{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		parsed = append(parsed, file)
		collectConsts(file, consts)
	}
	byFunc := map[string][]string{}
	for _, file := range parsed {
		for _, decl := range file.Decls {
			if fn, ok := decl.(*ast.FuncDecl); ok && fn.Body != nil {
				byFunc[fn.Name.Name] = append(byFunc[fn.Name.Name], callSQL(fn.Body, consts)...)
			}
		}
	}
	return byFunc
}

func collectConsts(file *ast.File, consts map[string]ast.Expr) {
	for _, decl := range file.Decls {
		gen, ok := decl.(*ast.GenDecl)
		if !ok || gen.Tok != token.CONST {
			continue
		}
		for _, spec := range gen.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if i < len(vs.Values) {
					consts[name.Name] = vs.Values[i]
				}
			}
		}
	}
}

// callSQL finds the statements passed to calls in body.
func callSQL(body *ast.BlockStmt, consts map[string]ast.Expr) []string {
	var out []string
	ast.Inspect(body, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		for _, arg := range call.Args {
			if s, ok := constString(arg, consts); ok && isStatement(s) {
				out = append(out, s)
			}
		}
		return true
	})
	return out
}

// constString evaluates string literals, named string constants and their
// concatenations: the forms internal/postgres writes its SQL in.
func constString(e ast.Expr, consts map[string]ast.Expr) (string, bool) {
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind != token.STRING {
			return "", false
		}
		s, err := strconv.Unquote(e.Value)
		return s, err == nil
	case *ast.Ident:
		if v, ok := consts[e.Name]; ok {
			return constString(v, consts)
		}
	case *ast.ParenExpr:
		return constString(e.X, consts)
	case *ast.BinaryExpr:
		if e.Op == token.ADD {
			l, ok1 := constString(e.X, consts)
			r, ok2 := constString(e.Y, consts)
			return l + r, ok1 && ok2
		}
	}
	return "", false
}

func isStatement(s string) bool {
	words := strings.Fields(s)
	return len(words) > 1 && slices.Contains([]string{"SELECT", "WITH", "INSERT", "UPDATE", "DELETE"}, strings.ToUpper(words[0]))
}

func TestNormalizeSQL(t *testing.T) {
	for _, tc := range []struct {
		name  string
		a, b  string
		equal bool
	}{
		{"placeholders by position", "SELECT 1 WHERE a = :org AND b = :principal;", "SELECT 1\n\tWHERE a = $2 AND b = $3", true},
		{"a value bound twice", "UPDATE t SET a = :x WHERE b = :x", "UPDATE t SET a = $1 WHERE b = $1", true},
		{"different bindings", "UPDATE t SET a = :x WHERE b = :y", "UPDATE t SET a = $1 WHERE b = $1", false},
		{"time literal and cast are not variables", "SELECT '00:00:00'::time, :v", "SELECT '00:00:00'::time, $7", true},
		{"case", "BEGIN;", "begin", true},
		{"different text", "SELECT a FROM t", "SELECT b FROM t", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := normalizeSQL(tc.a) == normalizeSQL(tc.b); got != tc.equal {
				t.Errorf("equal = %t, want %t:\n%s\n%s", got, tc.equal, normalizeSQL(tc.a), normalizeSQL(tc.b))
			}
		})
	}
}

func TestScriptStatements(t *testing.T) {
	script := "-- comment: not SQL\n\\set x 1\nSELECT 1\n  FROM t;\nSELECT v FROM u\n\\gset u_\n\\startpipeline\nBEGIN;\n\\endpipeline\n"
	got := scriptStatements(script)
	if len(got) != 3 || normalizeSQL(got[0]) != "select 1 from t" || normalizeSQL(got[1]) != "select v from u" || normalizeSQL(got[2]) != "begin" {
		t.Fatalf("got %q", got)
	}
}

// The mirror waits after each round trip, and only with a gap: a \gset
// query, then each pipeline (propose: 2 round trips, handshake: 5).
func TestWithGaps(t *testing.T) {
	for w, trips := range map[string]int{"propose": 2, "handshake": 5} {
		body, err := scripts.ReadFile("scripts/" + w + ".sql")
		if err != nil {
			t.Fatal(err)
		}
		if got := withGaps(body, 0); !bytes.Equal(got, body) {
			t.Errorf("%s: gap 0 changed the script", w)
		}
		gapped := string(withGaps(body, 700*time.Microsecond))
		if n := strings.Count(gapped, "\\sleep 700 us\n"); n != trips {
			t.Errorf("%s: %d sleeps, want one after each of its %d round trips", w, n, trips)
		}
		if strings.ReplaceAll(gapped, "\\sleep 700 us\n", "") != string(body) {
			t.Errorf("%s: the gaps changed more than the sleeps", w)
		}
		lines := strings.Split(gapped, "\n")
		for i, l := range lines {
			if strings.HasPrefix(l, "\\sleep") && lines[i-1] != "\\endpipeline" && !strings.HasPrefix(lines[i-1], "\\gset") {
				t.Errorf("%s: a sleep after %q, not after a round trip", w, lines[i-1])
			}
		}
	}
	if got := string(withGaps([]byte("SELECT 1\n\\gset x_"), time.Millisecond)); got != "SELECT 1\n\\gset x_\n\\sleep 1000 us\n" {
		t.Errorf("no final newline: %q", got)
	}
}
