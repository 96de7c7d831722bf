# ruled — common tasks. `make run` and `make test` are the two set-up commands.
GO        ?= go
LISTEN    ?= 127.0.0.1:8080
RULES     ?= examples/rules
VERSION   ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -X main.version=$(VERSION)

.PHONY: run test deps build install lint fmt bench bench-drivers plugins plugin-as bundle bench-go fuzz

# MODULES are the repository's Go modules: ruled itself and the SDK that
# plugins depend on (docs/plugins.md, "The SDK as a Go module"). `./...`
# stops at a nested go.mod, so vet, test, lint and bench-go run in each.
# cmd/ruled's TestMakefileListsEveryModule keeps this list complete.
MODULES   := . sdk sdk/process

# FUZZ lists package:target pairs that `make fuzz` runs for FUZZTIME each.
FUZZ      := host/httpapi:FuzzCheckBody host/httpapi:FuzzAuthHeaders host/grpcapi:FuzzParseJSONRequest internal/jsonw:FuzzAppendString sdk/abi:FuzzDecoders sdk/abi:FuzzDecodersAgreeWithProtobuf host/wasm/internal/meter:FuzzInstrument
FUZZTIME  ?= 10s

## run: install redis-server if missing, then serve examples/rules on 127.0.0.1:8080
run: build
	@./scripts/deps.sh run
	./bin/ruled serve --rules $(RULES) --listen $(LISTEN)

## test: install redis-server, nginx, caddy, chromium, node, wrk and a Rust toolchain for wasm32 if missing, then vet, format check, the race-enabled tests of every module and the example rules' tests; every step runs, and the failed ones are listed at the end
test:
	@./scripts/deps.sh test
	@./scripts/keepgoing.sh \
		$(foreach m,$(MODULES),"cd $(m) && $(GO) vet ./...") \
		'unformatted=$$(gofmt -l .); [ -z "$$unformatted" ] || { echo "gofmt needed:"; echo "$$unformatted"; exit 1; }' \
		$(foreach m,$(MODULES),"cd $(m) && $(GO) test -race -count=1 -timeout 15m ./...") \
		"$(GO) run ./cmd/ruled test examples/rules/..."

deps:
	@./scripts/deps.sh test

## fuzz: run every fuzz target briefly (FUZZTIME each); CI runs it
# Each runs in its package's directory, which works whichever module holds it;
# every target runs, and the failed ones are listed at the end.
fuzz:
	@./scripts/keepgoing.sh $(foreach f,$(FUZZ),"cd $(firstword $(subst :, ,$(f))) && $(GO) test -run '^$$' -fuzz '^$(lastword $(subst :, ,$(f)))$$' -fuzztime $(FUZZTIME) .")

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/ruled ./cmd/ruled

## install: install ruled, stamped with its version, into GOBIN (default: the bin directory of go env GOPATH), to have it on PATH
install:
	$(GO) install -ldflags "$(LDFLAGS)" ./cmd/ruled

## plugins: build every built-in as a Wasm module into bin/plugins/ (docs/abi.md)
plugins:
	@mkdir -p bin/plugins
	@for d in plugins/*/wasm; do n=$$(basename $$(dirname $$d)); \
		echo "GOOS=wasip1 GOARCH=wasm $(GO) build -buildmode=c-shared -trimpath -o bin/plugins/$$n.wasm ./$$d"; \
		GOOS=wasip1 GOARCH=wasm $(GO) build -buildmode=c-shared -trimpath -o bin/plugins/$$n.wasm ./$$d || exit 1; \
	done

## bundle: rewrite internal/scaffold/bundle.txtar, the SDK and conformance kit that ruled plugin new writes into a project, after changing sdk/, plugintest/ or what they use
bundle:
	$(GO) test ./internal/scaffold -run '^TestBundleIsCurrent$$' -count=1 -update

## plugin-as: build the AssemblyScript example plugin into examples/plugins/assemblyscript/build/ (node and npm)
plugin-as:
	cd examples/plugins/assemblyscript && npm ci --no-audit --no-fund && npm run build

## lint: staticcheck (installed into GOPATH/bin on first use)
lint:
	@command -v staticcheck >/dev/null 2>&1 || $(GO) install honnef.co/go/tools/cmd/staticcheck@v0.8.2
	@PATH="$$PATH:$$($(GO) env GOPATH)/bin" ./scripts/keepgoing.sh $(foreach m,$(MODULES),"cd $(m) && staticcheck ./...")

fmt:
	gofmt -w .

## bench: the load harness (raw Redis ceiling, engine, HTTP) against a private redis-server
bench:
	@./scripts/deps.sh bench
	$(GO) run ./bench -duration 5s -concurrency 64

## bench-drivers: ruled serve per plugin driver (native, Wasm, process) over HTTP, from the harness and black-box from wrk, against issues 18 and 41 targets
bench-drivers:
	@./scripts/deps.sh run
	$(GO) run ./bench -drivers -duration 5s -concurrency 64 -rounds 3 -black-box 8s

## bench-go: Go benchmarks of every layer against a real redis-server
bench-go:
	@./scripts/deps.sh run
	@for m in $(MODULES); do (cd $$m && $(GO) test -run '^$$' -bench . -benchtime 2s ./...) || exit 1; done
