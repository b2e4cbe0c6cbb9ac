package main

import (
	"fmt"
	"regexp"
	"strings"
)

// The pgbench scripts must run exactly billingd's statements, or the ratio
// compares billingd with something else. Two checks keep them honest: the
// test in scripts_test.go compares them with the SQL in internal/postgres's
// source, and the bench compares them with the statements its traced
// in-process billingd actually sent (countRoundTrips), which also catches a
// statement added to the hot path.

var (
	// A placeholder: a pgx positional parameter, or a pgbench variable
	// reference, which is a colon and then a letter or underscore
	// (pgbench's own rule, so "00:00:00" in a literal and "::" casts are
	// not variables). A pgbench reference may carry the character before
	// its colon along.
	placeholder = regexp.MustCompile(`\$[0-9]+|(^|[^:]):[A-Za-z_][A-Za-z0-9_]*`)
	spaces      = regexp.MustCompile(`\s+`)
)

// normalizeSQL makes a statement comparable: whitespace collapsed, case
// folded (pgx sends "begin", the scripts say BEGIN), no trailing semicolon,
// and placeholders renumbered by first appearance, so that
// "WHERE org = :org AND principal = :principal" and "WHERE org = $2 AND
// principal = $3" compare equal, while binding one value to two different
// places does not.
func normalizeSQL(sql string) string {
	sql = strings.TrimSuffix(strings.TrimSpace(spaces.ReplaceAllString(sql, " ")), ";")
	names := map[string]string{}
	sql = placeholder.ReplaceAllStringFunc(sql, func(m string) string {
		prefix, name := "", m
		if !strings.HasPrefix(m, "$") {
			prefix, name, _ = strings.Cut(m, ":")
		}
		if _, ok := names[name]; !ok {
			names[name] = fmt.Sprintf("$%d", len(names)+1)
		}
		return prefix + names[name]
	})
	return strings.ToLower(sql)
}

// scriptStatements are the SQL statements of a pgbench script, in order:
// comment lines and meta-commands (\set, \startpipeline…) left out, each
// statement ending with a semicolon at the end of a line or with a \gset
// line (which stores its row's columns in variables).
func scriptStatements(script string) []string {
	var stmts []string
	var cur strings.Builder
	for _, line := range strings.Split(script, "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, `\gset`) && strings.TrimSpace(cur.String()) != "" {
			stmts = append(stmts, cur.String()) // \gset ends a statement in place of its semicolon
			cur.Reset()
			continue
		}
		if trimmed == "" || strings.HasPrefix(trimmed, "--") || strings.HasPrefix(trimmed, `\`) {
			continue
		}
		cur.WriteString(line + "\n")
		if strings.HasSuffix(trimmed, ";") {
			stmts = append(stmts, cur.String())
			cur.Reset()
		}
	}
	if strings.TrimSpace(cur.String()) != "" {
		stmts = append(stmts, cur.String())
	}
	return stmts
}

// unmirrored returns the statements among sent that the script w does not
// run, normalised.
func unmirrored(w workload, sent []string) ([]string, error) {
	body, err := scripts.ReadFile("scripts/" + string(w) + ".sql")
	if err != nil {
		return nil, err
	}
	have := map[string]bool{}
	for _, s := range scriptStatements(string(body)) {
		have[normalizeSQL(s)] = true
	}
	var missing []string
	seen := map[string]bool{}
	for _, s := range sent {
		n := normalizeSQL(s)
		if !have[n] && !seen[n] {
			missing = append(missing, n)
			seen[n] = true
		}
	}
	return missing, nil
}
