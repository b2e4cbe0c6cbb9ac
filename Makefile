# billingd — run `make help` for the targets.

# Test tools are pinned and installed into .tools/<name>@<version>/, so a
# version bump here reinstalls them and nothing outside the tree is touched.
STRIPE_MOCK_VERSION := v0.190.0
STRIPE_MOCK_DIR := $(CURDIR)/.tools/stripe-mock@$(STRIPE_MOCK_VERSION)
STRIPE_MOCK := $(STRIPE_MOCK_DIR)/stripe-mock
export PATH := $(STRIPE_MOCK_DIR):$(PATH)
# staticcheck 2026.2.2: the first release line that type-checks Go 1.26.
STATICCHECK_VERSION := v0.8.2
STATICCHECK_DIR := $(CURDIR)/.tools/staticcheck@$(STATICCHECK_VERSION)
STATICCHECK := $(STATICCHECK_DIR)/staticcheck
# ORY Hydra, the real OpenID provider of the page sign-in tests (integration/
# hydra*_test.go). `go install` refuses it (its go.mod has replace
# directives), so the module's source is copied out of the module cache and
# built with SQLite (for DSN=memory), which needs cgo and a C compiler:
# ~160 s on 2 cores, once; the tests only run the cached binary.
HYDRA_VERSION := v2.3.0
HYDRA_DIR := $(CURDIR)/.tools/hydra@$(HYDRA_VERSION)
HYDRA := $(HYDRA_DIR)/hydra
export BILLINGD_TEST_HYDRA := $(HYDRA)

# Integration tests use TEST_DATABASE_URL; when it is unset and a PostgreSQL
# answers on 127.0.0.1:5432, that one is used, else testcontainers (Docker).
LOCAL_PG := $(shell command -v pg_isready >/dev/null && pg_isready -q -h 127.0.0.1 -p 5432 && echo postgres://postgres:postgres@127.0.0.1:5432/postgres?sslmode=disable)
TEST_DATABASE_URL ?= $(LOCAL_PG)
export TEST_DATABASE_URL

.DEFAULT_GOAL := help
.PHONY: help run test build tools lint fuzz docker migrate-new bench view mutants

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

# BILLINGD_DEV_STRIPE=mock make run runs stripe-mock (installed first) instead
# of the Stripe fake.
run: build $(if $(filter mock,$(BILLINGD_DEV_STRIPE)),tools) ## run billingd dev: PostgreSQL, a Stripe fake, a dev token issuer, demo data; no configuration
	./bin/billingd dev

build: ## build ./bin/billingd
	go build -o bin/billingd ./cmd/billingd

# The npm MCP client of the end-to-end MCP test, pinned by its lock file. npm
# writes node_modules/.package-lock.json, so a lock file change reinstalls.
NPM_CLIENT := integration/npmclient
NPM_CLIENT_INSTALLED := $(NPM_CLIENT)/node_modules/.package-lock.json
# mcp/appview's pinned npm packages (see `make view` below). Defined before
# the test rule: make expands a rule's prerequisites when it reads the rule.
APP_VIEW := mcp/appview
APP_VIEW_INSTALLED := $(APP_VIEW)/node_modules/.package-lock.json

# Integration tests spend most of their time waiting (PostgreSQL, Stripe
# stand-in delays, token expiry), so four run at once even on 2 cores
# (go test's default is GOMAXPROCS): 255 s serial, 207 s two at a time,
# 145 s four at a time, -race, on a shared 2-core machine. The timeout is
# go test's per package: the integration package's few minutes run long on a
# loaded machine, and a timeout there says nothing about billingd.
TEST_PARALLEL ?= 4

# The failpoint sweep (integration/sweep_test.go) runs a fixed slice of its
# cases here (two shards, two to three minutes) and every case with
# SWEEP=full (.ci/run: four shards, each with its own PostgreSQL, Stripe
# fake and processes, about a quarter of an hour with -race on 2 cores;
# -parallel must be at least the shards); the line it writes to
# SWEEP_REPORT says how many ran.
test: tools $(NPM_CLIENT_INSTALLED) $(APP_VIEW_INSTALLED) ## run every test: unit, and integration against PostgreSQL and stripe-mock
	@report=$$(mktemp); status=0; \
	SWEEP_REPORT=$$report go test -race -count=1 -parallel $(TEST_PARALLEL) -timeout 80m ./... || status=$$?; \
	cat $$report; rm -f $$report; exit $$status

$(NPM_CLIENT_INSTALLED): $(NPM_CLIENT)/package-lock.json
	@if command -v npm >/dev/null; then npm ci --prefix $(NPM_CLIENT) --no-audit --no-fund; \
	else echo "npm not found: TestMCPNpmClient will skip (and fail with CI=true)"; fi

# The MCP Apps view (mcp/appview) inlines the official ext-apps SDK pinned by
# its lock file; view.html is committed, so building billingd needs no npm.
# `make view` rebuilds it after a change to view.src.html or the pin, and
# TestViewMatchesPinnedSource checks that the committed file is that build.

$(APP_VIEW_INSTALLED): $(APP_VIEW)/package-lock.json
	@if command -v npm >/dev/null; then npm ci --prefix $(APP_VIEW) --no-audit --no-fund; \
	else echo "npm not found: TestViewMatchesPinnedSource will skip (and fail with CI=true)"; fi

view: $(APP_VIEW_INSTALLED) ## rebuild mcp/appview/view.html (the MCP Apps view) from its source and the pinned ext-apps SDK
	go run ./mcp/appview/build $(APP_VIEW)

tools: $(STRIPE_MOCK) $(HYDRA) ## install the pinned test tools (stripe-mock, ORY Hydra)

$(STRIPE_MOCK):
	GOBIN=$(STRIPE_MOCK_DIR) go install github.com/stripe/stripe-mock@$(STRIPE_MOCK_VERSION)

# hydra-client-go/v2 is a nested module the module zip leaves out; only
# Hydra's CLI client uses it, so its replace directive is dropped and the
# published version Hydra's go.mod requires is used (and added to go.sum).
$(HYDRA):
	@if ! command -v cc >/dev/null; then \
		echo "no C compiler: ORY Hydra is not built, its sign-in tests will skip (and fail with CI=true); apt-get install gcc"; \
		test "$$CI" != true; exit; fi
	@echo "building ORY Hydra $(HYDRA_VERSION) into $(HYDRA_DIR) (once; a few minutes)"
	@set -e; \
	dir=$$(cd / && go mod download -json github.com/ory/hydra/v2@$(HYDRA_VERSION) | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$$/\1/p'); \
	test -n "$$dir"; src=$$(mktemp -d); trap 'chmod -R u+w "$$src"; rm -rf "$$src"' EXIT; \
	cp -R "$$dir/." "$$src"; chmod -R u+w "$$src"; \
	cd "$$src"; go mod edit -dropreplace github.com/ory/hydra-client-go/v2; \
	go mod download github.com/ory/hydra-client-go/v2; \
	mkdir -p $(HYDRA_DIR); \
	CGO_ENABLED=1 go build -trimpath -tags sqlite,sqlite_omit_load_extension -o $(HYDRA).tmp .; \
	mv $(HYDRA).tmp $(HYDRA)

# The mutants (integration/mutants): realistic bugs in the money path, each
# a patch and the sweep cases that must catch it. Not part of make test (a
# minute or two each): run it before finishing a change to the money path.
# MUTANTS=regexp picks some.
mutants: tools ## apply each mutant of integration/mutants and fail unless the sweep catches every one (~30 min)
	./integration/mutants/run.sh

FUZZTIME ?= 15s
FUZZ_TARGETS := ./rest:FuzzDecodeStrict ./internal/httpedge:FuzzBearerToken ./internal/auth:FuzzVerify \
	./billing:FuzzWellFormedToken ./billing:FuzzRequestValidation ./billing:FuzzDisplayName

fuzz: ## run every fuzz target for FUZZTIME (default 15s) each
	@for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; echo "fuzz $$name ($$pkg)"; \
		go test -run='^$$' -fuzz="^$$name$$" -fuzztime=$(FUZZTIME) -fuzzminimizetime=1x $$pkg || exit 1; \
	done

# BENCH_DATABASE_URL picks the PostgreSQL server (default 127.0.0.1:5432,
# user postgres); BENCH_FLAGS adds flags (go run ./cmd/billingd-bench -h).
bench: ## measure billingd against a pgbench mirror of its SQL, alternately in rounds (~25 min on 2 cores; PostgreSQL, pgbench)
	go run ./cmd/billingd-bench -out cmd/billingd-bench/RESULTS.md -doc docs/performance.md $(BENCH_FLAGS)

lint: $(STATICCHECK) ## go vet, gofmt check and staticcheck (installed pinned into .tools/)
	go vet ./...
	@test -z "$$(gofmt -l .)" || (gofmt -l . && exit 1)
	$(STATICCHECK) ./...

$(STATICCHECK):
	GOBIN=$(STATICCHECK_DIR) go install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

IMAGE ?= billingd
docker: ## build the container image (IMAGE=billingd) from the Dockerfile; needs a Docker engine
	docker build -t $(IMAGE) .

# migrate-new numbers the pair after the highest existing migration, in
# golang-migrate's NNNNNN_name.{up,down}.sql form.
migrate-new: ## create the next empty migrations/NNNNNN_NAME.{up,down}.sql: make migrate-new NAME=add_x
	@echo "$(NAME)" | grep -Eq '^[a-z0-9_]+$$' || { echo "usage: make migrate-new NAME=add_x (lower-case letters, digits, _)"; exit 2; }
	@last=$$(ls migrations | sed -n 's/^\([0-9]\{6\}\)_.*\.up\.sql$$/\1/p' | sort | tail -n 1); \
	base=migrations/$$(printf '%06d' $$(expr $${last:-0} + 1))_$(NAME); \
	echo "-- $(NAME): the change" > $$base.up.sql; \
	echo "-- $(NAME): undo the change" > $$base.down.sql; \
	echo "created $$base.up.sql and $$base.down.sql"
