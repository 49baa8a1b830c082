# tablestore — see README.md. Every target runs on a fresh machine with Go;
# `make proto` also installs the pinned generators.
GO            ?= go
PROTOC_GEN_GO_VERSION      := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.5.1
GOBIN         ?= $(shell $(GO) env GOPATH)/bin
DATA          ?= ./data

.PHONY: build run test test-short bench fuzz proto vet fmt clean sim

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

# The simulator's target (docs/split-merge.md#the-simulator): 1,000 servers,
# 100,000 ranges, one simulated hour in under 60 s, a 10x hot spot on 1% of
# the ranges absorbed within 2 simulated minutes; reports in ./sim-report.*.
sim:
	TABLESTORE_SIM_TARGET=1 TABLESTORE_SIM_REPORT_DIR=$(CURDIR) $(GO) test -count=1 -v -run TestFullScaleTarget -timeout 10m ./sim

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
