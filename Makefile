# Tether — build, test, demo and bench. `make demo` and `make test` work on a fresh clone with
# only Go installed: whatever else a target needs, it installs (see .ci/deps).

GO        ?= go
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -s -w -X main.version=$(VERSION)
BIN       := $(CURDIR)/bin
BINARIES  := tether tether-runner tether-provider-local tether-provider-docker tether-provider-daytona
export CGO_ENABLED := 0

.PHONY: all build demo test test-short bench lint generate image images clean deps

all: build

build:
	@mkdir -p $(BIN)
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/ $(addprefix ./cmd/,$(BINARIES))

demo: build
	$(BIN)/tether demo

# The full suite: unit, fuzz seeds and integration tests against the real binaries, with -race.
test: build deps
	TETHER_BIN_DIR=$(BIN) CGO_ENABLED=1 $(GO) test -race -count=1 -timeout 60m ./...

test-short: build
	TETHER_BIN_DIR=$(BIN) $(GO) test -short -count=1 ./...

bench: build deps
	TETHER_BIN_DIR=$(BIN) $(GO) run ./integration/bench

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

# Regenerates the provider plugin's gRPC code (Debian: protobuf-compiler).
generate:
	@command -v protoc >/dev/null || .ci/deps protoc
	$(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
	$(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
	PATH="$$($(GO) env GOPATH)/bin:$$PATH" $(GO) generate ./plugins/...

# Images built FROM scratch out of ./bin (nothing is pulled): a runner image with busybox for a
# shell, and a controller image. The Dockerfile builds the same two from source where a Go image
# can be pulled.
images: build deps
	.ci/images $(BIN)

# Just the runner image (tether-runner:dev), the Docker provider's default: any image with /bin/sh
# works too, since the provider copies the runner in.
image: build
	@.ci/deps docker busybox
	.ci/images $(BIN) runner

deps:
	.ci/deps

clean:
	rm -rf $(BIN)
