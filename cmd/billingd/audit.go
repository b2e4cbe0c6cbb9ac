package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/billingd/billingd/internal/evidence"
)

const auditSynopsis = "audit verify [--jwks URL|FILE] [--allow-unsigned] FILE|-"

// auditCmd checks an audit export offline: the hash chain, every receipt in
// it, and the signed checkpoint that ends it, against the published receipt
// keys.
func auditCmd(ctx context.Context, e env, args []string) error {
	if len(args) == 0 || args[0] != "verify" {
		return fmt.Errorf("%w: %s", errUsage, auditSynopsis)
	}
	fs := flags(e, "audit verify", auditSynopsis)
	jwksFrom := fs.String("jwks", "", "the receipt keys: a URL (…/.well-known/jwks.json) or a JWKS file "+
		"(default: PUBLIC_BASE_URL/.well-known/jwks.json when PUBLIC_BASE_URL is set)")
	allowUnsigned := fs.Bool("allow-unsigned", false, "accept an export without its signed checkpoint "+
		"(checks the chain alone, which does not show a rewritten, re-chained export)")
	// Flags may come before or after the file.
	rest := args[1:]
	var files []string
	for {
		if err := parse(fs, rest); err != nil {
			return err
		}
		if fs.NArg() == 0 {
			break
		}
		files, rest = append(files, fs.Arg(0)), fs.Args()[1:]
	}
	if len(files) != 1 {
		fs.Usage()
		return fmt.Errorf("%w: %s", errUsage, auditSynopsis)
	}
	if *jwksFrom == "" && e.getenv("PUBLIC_BASE_URL") != "" {
		*jwksFrom = strings.TrimSuffix(e.getenv("PUBLIC_BASE_URL"), "/") + "/.well-known/jwks.json"
	}
	keys, err := loadJWKS(ctx, *jwksFrom)
	if err != nil {
		return err
	}
	in := e.stdin
	if files[0] != "-" {
		f, err := os.Open(files[0])
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	rep, err := evidence.Verify(in, keys, evidence.Options{AllowUnsigned: *allowUnsigned})
	if err != nil {
		return fmt.Errorf("audit verify: %w", err)
	}
	fmt.Fprintf(e.stdout, "verified: org %s, %d events, %d receipts; head seq %d hash %s\n",
		rep.Org, rep.Events, rep.Receipts, rep.HeadSeq, rep.HeadHash)
	if cp := rep.Checkpoint; cp != nil {
		fmt.Fprintf(e.stdout, "  checkpoint signed at %s\n", time.Unix(cp.IssuedAt, 0).UTC().Format(time.RFC3339))
	} else {
		fmt.Fprintln(e.stdout, "  UNSIGNED: no checkpoint; a rewritten, re-chained export would also verify")
	}
	for _, x := range rep.Executed {
		when := ""
		if x.EffectiveAt != nil {
			when = ", scheduled for " + x.EffectiveAt.UTC().Format(time.RFC3339)
		}
		if invoiced := evidence.InvoicedText(x); invoiced != "" {
			when += ", " + invoiced
		}
		fmt.Fprintf(e.stdout, "  seq %d %s %s%s: consent %s\n", x.Seq, x.ConfirmationID, x.Operation, when,
			evidence.ConsentText(x.Consent))
	}
	return nil
}

// loadJWKS reads a key set from a URL or a file; "" is the empty set (an
// export with receipts then fails verification).
func loadJWKS(ctx context.Context, from string) (jose.JSONWebKeySet, error) {
	var set jose.JSONWebKeySet
	if from == "" {
		return set, nil
	}
	var data []byte
	var err error
	if strings.HasPrefix(from, "http://") || strings.HasPrefix(from, "https://") {
		data, err = fetchJWKS(ctx, from)
	} else {
		data, err = os.ReadFile(from)
	}
	if err != nil {
		return set, fmt.Errorf("receipt keys: %w", err)
	}
	if err := json.Unmarshal(data, &set); err != nil {
		return set, fmt.Errorf("receipt keys: not a JWKS: %w", err)
	}
	return set, nil
}

func fetchJWKS(ctx context.Context, url string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return io.ReadAll(io.LimitReader(resp.Body, 1<<20))
}
