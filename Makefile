# tablestore — see README.md. Every target runs on a fresh machine with Go;
# `make proto` also installs the pinned generators.
GO            ?= go
PROTOC_GEN_GO_VERSION      := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.5.1
GOBIN         ?= $(shell $(GO) env GOPATH)/bin
DATA          ?= ./data

.PHONY: build run test test-short bench fuzz proto vet fmt clean chaos

build:
	$(GO) build -o bin/tablestore ./cmd/tablestore

run: build
	./bin/tablestore dev --data-dir $(DATA)

# Packages run one at a time (-p 1): several start whole clusters with real
# Raft timeouts, and on 2 cores running them side by side starves heartbeats.
test:
	$(GO) vet ./...
	$(GO) test -count=1 -p 1 -timeout 9m ./...

test-short:
	$(GO) test -count=1 -short ./...

bench: build
	$(GO) run ./bench -binary ./bin/tablestore

fuzz:
	./scripts/fuzz.sh 60s

proto:
	@command -v protoc >/dev/null || (apt-get update -qq && apt-get install -y -qq protobuf-compiler)
	$(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	$(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
	PATH=$(GOBIN):$$PATH protoc -I proto \
		--go_out=. --go_opt=module=tablestore \
		--go-grpc_out=. --go-grpc_opt=module=tablestore \
		proto/tablestore/v1/*.proto

vet:
	$(GO) vet ./...

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf bin

# Jepsen-style fault injection against separate processes (chaos/): SEEDS
# seeds of CHAOS_DURATION faults each; results go to docs/reliability.md.
SEEDS          ?= 10
CHAOS_DURATION ?= 45s
chaos:
	$(GO) test -count=1 -timeout 0 -run 'TestChaos$$' ./chaos -v -args -chaos.seeds=$(SEEDS) -chaos.duration=$(CHAOS_DURATION) -chaos.dir=$(DATA)/chaos
