# Portcullis — build, test and packaging targets. `make help` lists them.
#
# Tests that need the real npm MCP peers find them through PORTCULLIS_TEST_NPM
# (exported below); tests that need the Go test servers build them themselves into a
# temporary directory. The servers are their own module (testdata/servers/go.mod,
# so that the main module's `go mod tidy` cannot drop their go-sdk dependency):
#   go -C testdata/servers build -o DIR/echo ./echo

SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

GO ?= go
# fyne.io/tools release used by `make app` (the `fyne` packaging command).
FYNE_TOOLS ?= fyne.io/tools/cmd/fyne@v1.7.4
# Build tags of the real (cgo) app. no_emoji leaves out Fyne's bundled colour
# emoji font (4 MB in the binary, and parsed again for each text style the
# first time a window is laid out: 14 MB of Go heap, measured in
# docs/BENCHMARKS.md); an emoji in a tool description falls back to the
# system's fonts. Exported for scripts/measure-ui.sh and scripts/screenshots.sh.
export APP_TAGS ?= no_emoji

export PORTCULLIS_TEST_NPM := $(CURDIR)/testdata/npm/node_modules

GO_FILES = $(shell find . -name '*.go' -not -path './.git/*' -not -path './testdata/npm/*' -not -path './bin/*')
TEST_SERVERS = $(notdir $(patsubst %/,%,$(wildcard testdata/servers/*/)))

.PHONY: help
help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  %-16s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: front ## build the menu-bar app with cgo and Fyne into bin/portcullis-app, beside the front bin/portcullis
	CGO_ENABLED=1 $(GO) build -tags '$(APP_TAGS)' -o bin/portcullis-app ./cmd/portcullis-app

.PHONY: build-headless
build-headless: front ## build without cgo (Fyne test driver, -tags ci) into bin/portcullis-app: every command but no menu-bar window (`portcullis version` says which build it is); the front bin/portcullis beside it
	CGO_ENABLED=0 $(GO) build -tags ci -o bin/portcullis-app ./cmd/portcullis-app

.PHONY: front
front: ## build the front into bin/portcullis: the small executable agents run (`portcullis connect LABEL` starts in a few ms); it execs bin/portcullis-app, the full program, for every other command
	CGO_ENABLED=0 $(GO) build -o bin/portcullis .

# Where `make install` puts portcullis: PREFIX/bin. ~/.local on Linux (on the
# PATH of most desktop sessions), /usr/local on macOS.
PREFIX ?= $(if $(filter Darwin,$(shell uname -s)),/usr/local,$(HOME)/.local)
# Where polkitd reads its actions (Linux). `make install` copies Portcullis's
# polkit action (assets/polkit/dev.portcullis.approve.policy, which approvals
# need to be OS-authenticated) into PREFIX/share/polkit-1/actions, and into
# this directory only when it can write there (as root); otherwise it prints
# the one sudo command that does. POLKIT_ACTIONS_DIR= (empty) keeps an install
# inside PREFIX whoever runs it.
POLKIT_ACTIONS_DIR ?= /usr/share/polkit-1/actions
POLKIT_POLICY := assets/polkit/dev.portcullis.approve.policy
# Which build `make install` makes: app (the menu-bar app, cgo), headless (no
# cgo, no window), or auto: app when a C compiler and the OpenGL headers are
# found, else headless (and it says so).
INSTALL_BUILD ?= auto

.PHONY: install
install: ## build portcullis and install it (the front portcullis and the full program portcullis-app) into PREFIX/bin (default ~/.local, /usr/local on macOS; INSTALL_BUILD=auto|app|headless); on Linux the polkit action into PREFIX/share/polkit-1/actions and POLKIT_ACTIONS_DIR when writable (else the sudo command); on macOS Portcullis.app into ~/Applications
	@kind='$(INSTALL_BUILD)'; \
	if [[ "$$kind" == auto ]]; then \
		kind=headless; \
		if [[ "$$(uname -s)" == Darwin ]]; then command -v cc >/dev/null && kind=app; \
		elif command -v gcc >/dev/null && echo '#include <GL/gl.h>' | gcc -E -x c - >/dev/null 2>&1; then kind=app; fi; \
		[[ "$$kind" == app ]] || echo "install: no C compiler or OpenGL headers found: installing the headless build (every command, no menu-bar window); scripts/test-deps.sh lists the packages of the app build"; \
	fi; \
	mkdir -p bin '$(PREFIX)/bin'; \
	case "$$kind" in \
		app) $(MAKE) --no-print-directory build ;; \
		headless) $(MAKE) --no-print-directory build-headless ;; \
		*) echo "install: INSTALL_BUILD is auto, app or headless, not $$kind"; exit 2 ;; \
	esac; \
	install -m 0755 bin/portcullis-app '$(PREFIX)/bin/portcullis-app'; \
	install -m 0755 bin/portcullis '$(PREFIX)/bin/portcullis'; \
	if [[ "$$(uname -s)" == Linux ]] && ! command -v bwrap >/dev/null; then echo "note: bubblewrap (bwrap) is not installed: servers will run without a sandbox until it is (sudo apt install bubblewrap, or sudo dnf install bubblewrap)"; fi; \
	echo "installed $$('$(PREFIX)/bin/portcullis' version) as $(PREFIX)/bin/portcullis (the front) and $(PREFIX)/bin/portcullis-app"; \
	if [[ "$$(uname -s)" == Linux ]]; then \
		shipped='$(PREFIX)/share/polkit-1/actions/$(notdir $(POLKIT_POLICY))'; dir='$(POLKIT_ACTIONS_DIR)'; \
		install -D -m 0644 '$(POLKIT_POLICY)' "$$shipped"; q="$$(printf '%q' "$$shipped")"; \
		if [[ -z "$$dir" ]]; then \
			echo "note: polkit action installed as $$shipped only (POLKIT_ACTIONS_DIR is empty): approvals are not OS-authenticated until it is in /usr/share/polkit-1/actions: sudo install -m 0644 $$q /usr/share/polkit-1/actions/"; \
		elif [[ "$$(realpath -m "$$dir")" == "$$(realpath -m "$$(dirname "$$shipped")")" ]]; then \
			echo "installed the polkit action as $$shipped: approvals can be OS-authenticated (portcullis status says whether they are)"; \
		elif [[ ! -d "$$dir" ]]; then \
			echo "note: polkit is not installed ($$dir is missing): approvals are not OS-authenticated. Install polkit (sudo apt install polkitd, or sudo dnf install polkit), then its action: sudo install -m 0644 $$q $$dir/"; \
		elif [[ -w "$$dir" ]]; then \
			install -m 0644 "$$shipped" "$$dir/" && echo "installed the polkit action into $$dir: approvals can be OS-authenticated (portcullis status says whether they are)"; \
		else \
			echo "note: approvals are not OS-authenticated until the polkit action is in $$dir, which needs root: sudo install -m 0644 $$q $$dir/"; \
		fi; \
	fi; \
	scripts/install-takeover.sh '$(PREFIX)'; \
	if [[ "$$(uname -s)" == Darwin && "$$kind" == app ]]; then \
		$(MAKE) --no-print-directory app && mkdir -p "$$HOME/Applications" && rm -rf "$$HOME/Applications/Portcullis.app" && cp -R bin/Portcullis.app "$$HOME/Applications/" && echo "installed $$HOME/Applications/Portcullis.app"; \
	fi; \
	case ":$$PATH:" in *':$(PREFIX)/bin:'*) ;; *) echo "note: $(PREFIX)/bin is not on your PATH; add it (for example in ~/.profile: export PATH=\"$(PREFIX)/bin:\$$PATH\")" ;; esac

.PHONY: install-polkit
install-polkit: ## Linux: install only the polkit action into POLKIT_ACTIONS_DIR (default /usr/share/polkit-1/actions), so that approvals can be OS-authenticated; needs root: sudo make install-polkit
	@[[ -n '$(POLKIT_ACTIONS_DIR)' ]] || { echo "install-polkit: POLKIT_ACTIONS_DIR is empty"; exit 2; }
	install -D -m 0644 '$(POLKIT_POLICY)' '$(POLKIT_ACTIONS_DIR)/$(notdir $(POLKIT_POLICY))'

.PHONY: uninstall
uninstall: ## remove what `make install` installed (PREFIX/bin/portcullis and portcullis-app, the polkit action in PREFIX/share; on macOS ~/Applications/Portcullis.app); your data and agent configurations stay
	rm -f '$(PREFIX)/bin/portcullis' '$(PREFIX)/bin/portcullis-app' '$(PREFIX)/share/polkit-1/actions/$(notdir $(POLKIT_POLICY))'
	@if [[ "$$(uname -s)" == Darwin ]]; then rm -rf "$$HOME/Applications/Portcullis.app"; fi
	@a='$(POLKIT_ACTIONS_DIR)/$(notdir $(POLKIT_POLICY))'; if [[ -n '$(POLKIT_ACTIONS_DIR)' && -f "$$a" && "$$(realpath -m "$$a")" != "$$(realpath -m '$(PREFIX)/share/polkit-1/actions/$(notdir $(POLKIT_POLICY))')" ]]; then echo "the polkit action stays in $$a (another install may use it); remove it with: sudo rm $$a"; fi

.PHONY: test-deps
test-deps: ## install what the tests need when missing (Debian packages, npm peers)
	bash scripts/test-deps.sh

.PHONY: test
test: test-deps ## test-deps, all tests (no cgo, -tags ci, real Secret Service on Linux), 50000 executions of each fuzz target, then `make install` of the cgo app into a temporary PREFIX (nothing outside it) and its `portcullis version`
	# Each test binary gets a throwaway Secret Service of its own (go test
	# -exec): the keychain tests lock its collection, which must not fail the
	# tests of another package running at the same time.
	CGO_ENABLED=0 $(GO) test -exec "$(CURDIR)/scripts/with-secret-service.sh" -tags ci -count=1 -timeout 20m ./...
	CGO_ENABLED=0 $(GO) -C testdata/servers test -count=1 -timeout 5m ./...
	@echo "fuzzing each fuzz target for 50000 executions (about 40 s in all)"
	$(MAKE) --no-print-directory fuzz FUZZTIME=50000x
	@echo "make install of the cgo (Fyne) app into a temporary PREFIX, so that neither a broken UI build nor a broken install can land"
	prefix="$$(mktemp -d)"; trap 'rm -rf "$$prefix"' EXIT; \
	$(MAKE) --no-print-directory install INSTALL_BUILD=app PREFIX="$$prefix" POLKIT_ACTIONS_DIR=; \
	"$$prefix/bin/portcullis" version | grep -F '(menu-bar app, '

# How long `make fuzz` runs each fuzz target, as a count of executions (`make
# test` runs 50000 of each). A count rather than a duration: with a duration,
# Go 1.26's fuzz coordinator can report a bare "context deadline exceeded"
# failure at the deadline on a loaded machine without having found anything
# (golang/go#75804, fixed in Go 1.27). FUZZTIME=5m still works for a long run.
FUZZTIME ?= 200000x
# How long `make soak` drives traffic.
SOAK_DURATION ?= 3m

.PHONY: fuzz
fuzz: ## run every fuzz target (func FuzzX under core/, internal/) for FUZZTIME each (default 200000 executions); corpora in each package's testdata/fuzz
	@grep -rEo --include='*_test.go' '^func Fuzz[A-Za-z0-9_]+' core internal | sort -u | while IFS=: read -r file fn; do \
		name="$${fn#func }"; dir="./$$(dirname "$$file")"; \
		echo "fuzzing $$name in $$dir for $(FUZZTIME)"; \
		CGO_ENABLED=0 $(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) "$$dir" || exit 1; \
	done

.PHONY: soak
soak: ## soak test (SOAK_DURATION, default 3m): 20 agent runs, 5 servers, rebuilds, random kills; no leaked process or fd, audit verifies
	CGO_ENABLED=0 $(GO) test -tags 'ci soak' -count=1 -timeout 30m -run '^TestRobustSoak$$' -v ./e2e/ -args -soak.duration $(SOAK_DURATION)

.PHONY: vet
vet: ## go vet (no cgo, -tags ci), including the test servers
	CGO_ENABLED=0 $(GO) vet -tags ci ./...
	CGO_ENABLED=0 $(GO) -C testdata/servers vet ./...

# staticcheck's version: pinned, run with `go run` (fetched through the
# module proxy on first use, then from the module cache).
STATICCHECK_VERSION ?= v0.8.2

.PHONY: staticcheck
staticcheck: ## staticcheck's default checks (no cgo, -tags ci), pinned version
	CGO_ENABLED=0 $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) -tags ci ./...

.PHONY: fmt-check
fmt-check: ## fail when a Go file is not gofmt-formatted
	@out="$$(gofmt -l $(GO_FILES))"; if [[ -n "$$out" ]]; then echo "not gofmt-formatted (run make fmt):"; echo "$$out"; exit 1; fi

.PHONY: check
check: fmt-check vet staticcheck test ## fmt-check, vet, staticcheck, test, then vet for macOS (darwin/arm64, no cgo) of all that builds without cgo there
	# app/ and cmd/portcullis-app need cgo on darwin (Fyne's darwin widgets are cgo even
	# with -tags ci); everything else, the front (.) too, must type-check for macOS here.
	GOOS=darwin GOARCH=arm64 CGO_ENABLED=0 $(GO) vet -tags ci . ./core/... ./platform/... ./internal/...

# bench/'s BenchmarkIdle measures the daemon for PORTCULLIS_BENCH_IDLE_WINDOW
# (a Go duration, default 10s) with each of 0, 1, 10 and 100 idle agent runs
# (about 2 minutes in all); BenchmarkLoad has 30, then 100 agent runs make
# PORTCULLIS_BENCH_LOAD_CALLS calls each (default 50) at once. With the other
# benchmarks of bench/ they take more than go test's default 10 minutes.
.PHONY: bench
bench: ## run the benchmarks (no tests; the daemon idle with 0 to 100 agent runs, and under load from 30 and 100) and the relay comparison; copy the figures into docs/BENCHMARKS.md
	CGO_ENABLED=0 $(GO) test -tags ci -run '^$$' -bench . -benchmem -timeout 40m ./...
	CGO_ENABLED=0 $(GO) run ./bench/cmd/relaybench
	@echo "Write these figures, with the machine and the date, into docs/BENCHMARKS.md."

.PHONY: bench-ui
bench-ui: ## the menu-bar app under Xvfb (scripts/measure-ui.sh, scripts/measure-idle.sh): approval request → window mapped, idle RSS with 5 servers; idle CPU, wakeups and RSS with 0 and 1 server under a real tray host (the app and its standby window process), the first and later approval windows at 1x and 2x; copy the figures into docs/BENCHMARKS.md
	bash scripts/measure-ui.sh
	bash scripts/measure-idle.sh

.PHONY: demo
demo: ## scripted headless demo: builds portcullis and the inventory server, drives an agent through the daemon
	CGO_ENABLED=0 $(GO) run ./internal/demo

.PHONY: testservers
testservers: ## build the Go MCP test servers (testdata/servers/*) into bin/testservers/
	@mkdir -p bin/testservers
	for s in $(TEST_SERVERS); do CGO_ENABLED=0 $(GO) -C testdata/servers build -o $(CURDIR)/bin/testservers/$$s ./$$s; done
	@ls -1 bin/testservers

.PHONY: screenshots
screenshots: ## docs/screenshots/*.png (1x and 2x) from the real cgo app under Xvfb (scripts/screenshots.sh)
	bash scripts/screenshots.sh

.PHONY: icons
icons: ## redraw the PNG icons in assets/ (go run assets/gen/main.go)
	CGO_ENABLED=0 $(GO) run assets/gen/main.go -out assets

.PHONY: fmt
fmt: ## gofmt every Go file
	gofmt -l -w $(GO_FILES)

.PHONY: app
app: ## macOS only: package bin/Portcullis.app with fyne (Xcode command line tools needed): the front is the bundle's executable, portcullis-app beside it
	@[[ "$$(uname -s)" == Darwin ]] || { echo "make app packages a macOS bundle and runs on macOS only"; exit 1; }
	@mkdir -p bin/darwin
	# Both executables universal (amd64 + arm64), as fyne package builds them. The
	# front is built here and handed to fyne package (--executable): fyne would add
	# its metadata file, and with it Fyne, to a package it builds itself. The full
	# program is built with fyne's release tag and goes beside the front, where
	# the front finds it.
	for arch in amd64 arm64; do \
		CGO_ENABLED=0 GOARCH=$$arch $(GO) build -o bin/darwin/portcullis-$$arch . && \
		CGO_ENABLED=1 GOARCH=$$arch $(GO) build -tags '$(APP_TAGS),release' -o bin/darwin/portcullis-app-$$arch ./cmd/portcullis-app || exit 1; \
	done
	lipo -create -output bin/darwin/portcullis bin/darwin/portcullis-amd64 bin/darwin/portcullis-arm64
	lipo -create -output bin/darwin/portcullis-app bin/darwin/portcullis-app-amd64 bin/darwin/portcullis-app-arm64
	# --use-raw-icon: assets/icon.png already has the macOS tile, margin and corners.
	# fyne package bumps Details.Build in FyneApp.toml; keep the committed file unchanged.
	cp FyneApp.toml bin/FyneApp.toml.orig
	CGO_ENABLED=1 $(GO) run $(FYNE_TOOLS) package --target darwin --release --use-raw-icon --executable bin/darwin/portcullis || { mv bin/FyneApp.toml.orig FyneApp.toml; exit 1; }
	mv bin/FyneApp.toml.orig FyneApp.toml
	install -m 0755 bin/darwin/portcullis-app Portcullis.app/Contents/MacOS/portcullis-app
	# No Dock icon: fyne's Info.plist template has no LSUIElement, so add it, then
	# re-sign ad hoc because editing Info.plist invalidates the bundle signature.
	plutil -replace LSUIElement -bool YES Portcullis.app/Contents/Info.plist
	codesign --force --deep --sign - Portcullis.app
	rm -rf bin/Portcullis.app && mv Portcullis.app bin/Portcullis.app
	@echo "built bin/Portcullis.app"

.PHONY: clean
clean: ## remove bin/
	rm -rf bin
