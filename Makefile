# opsbot: `make run` boots the lab and leaves you one command from a probe; `make test` runs
# every test against real parts. Both install what they need (Debian packages when root).

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
DEB_PACKAGES := openssh-server openssh-client procps systemd-container debootstrap iproute2 \
	prometheus prometheus-alertmanager postgresql chromium fonts-dejavu-core faketime
STAMP_DEB := $(VENV)/.deb-installed
STAMP_PY := $(VENV)/.py-installed

.PHONY: setup deps-deb deps-py run test lint test-fast test-patch lab-down bench clean

setup: deps-deb deps-py

deps-deb: $(STAMP_DEB)
$(STAMP_DEB): Makefile
	@mkdir -p $(VENV)
	@if [ "$$(id -u)" = 0 ]; then \
		echo "==> installing Debian packages: $(DEB_PACKAGES)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(DEB_PACKAGES) >/dev/null; \
	else echo "==> not root: skipping Debian packages (lab and integration tests need them)"; fi
	@touch $@

deps-py: $(STAMP_PY)
$(STAMP_PY): pyproject.toml
	@echo "==> creating $(VENV) and installing opsbot with its dev and kernels extras"
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/pip install -q --upgrade pip
	@$(BIN)/pip install -q -e '.[dev,kernels]'
	@touch $@

run: setup
	@echo "==> booting the lab: Debian nodes under systemd-nspawn (real systemd + sshd) running the SGLang emulator"
	@echo "    (the first run builds the node root file system with debootstrap: about 90 s, cached after)"
	@$(BIN)/opsbot lab up --monitoring
	@$(BIN)/opsbot lab status
	@echo
	@echo "The lab is up (stop it with: make lab-down). In another shell:  $(BIN)/opsbot probe"
	@echo "==> opsbot serve: status page http://127.0.0.1:8080/, API docs /docs (Ctrl-C stops it)"
	@$(BIN)/opsbot serve

test: setup lint
	@$(BIN)/python -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

# ruff on every tree, mypy on opsbot/ (strict on the contracts, the flow, act, the lifecycles and the store:
# pyproject.toml says which); both fail `make test`.
lint: deps-py
	@$(BIN)/ruff check opsbot serving kernels bench tests
	@$(BIN)/mypy

test-fast: deps-py
	@$(BIN)/python -m pytest -q -m "not lab and not integration" $(PYTEST_ARGS)

# The SGLang patch attached to the real sglang 0.5.23 modules on the CPU: needs the patch-ci extra
# (about 40 packages, minutes to install), so it is not part of `make test` (kernels/README.md).
test-patch: deps-py
	@$(BIN)/pip install -q -e '.[dev,kernels,patch-ci]'
	@OPSBOT_PATCH_CI=1 $(BIN)/python -m pytest -q -p no:cacheprovider tests/kernels/test_sglang_patch.py $(PYTEST_ARGS)

lab-down:
	@$(BIN)/opsbot lab down

clean:
	rm -rf $(VENV) .opsbot
