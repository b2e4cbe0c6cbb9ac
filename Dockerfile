# billingd's container image: a static binary on distroless, as non-root.
#
#   make docker                      (docker build -t billingd .)
#   docker run -p 8080:8080 -e DATABASE_URL=… -e STRIPE_SECRET_KEY=… \
#     -e OAUTH_ISSUER=… -e PUBLIC_BASE_URL=https://billing.example.com billingd
#
# Health: the image has no shell or curl for a HEALTHCHECK, so probe over
# HTTP from outside: GET /healthz (alive) for liveness, GET /readyz (database
# answers, schema current) for readiness. See docs/operations.md, "Docker".

# The go.mod version: the golang images set GOTOOLCHAIN=local, so an older
# Go would refuse the module.
ARG GO_VERSION=1.26.8
FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
# Modules first: this layer is reused until go.mod or go.sum change.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# CGO off: a static binary that needs no libc in the runtime image.
RUN CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o /out/billingd ./cmd/billingd

# static-debian12 has CA certificates (for Stripe and the JWKS over HTTPS),
# tzdata and a nonroot user (65532), and nothing else.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/billingd /usr/local/bin/billingd
USER nonroot:nonroot
# In a container, listen on every interface; set PUBLIC_BASE_URL to the
# external URL, from which the accepted token audiences derive.
ENV LISTEN_ADDR=0.0.0.0:8080
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/billingd"]
CMD ["serve"]
