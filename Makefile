# The whole set-up on a fresh machine is `make run` (the main job) or `make test` (checks and tests).
# Both create .venv once and reinstall only when pyproject.toml changes.
PY ?= python3
VENV := .venv
STAMP := $(VENV)/.installed
BIN := $(VENV)/bin

.PHONY: run test lint typecheck pytest bench clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	@$(BIN)/python -m pip install --quiet --upgrade pip
	@$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

# After the campaign, every shipped named configuration (docs/check.md) but those whose file opts out with
# "default_run": false and says why in its description (admin-reset: minutes of CPU).
run: $(STAMP)
	$(BIN)/rmqspec campaign
	$(BIN)/rmqspec check --config all --quiet

test: $(STAMP) lint typecheck pytest

lint: $(STAMP)
	$(BIN)/ruff check src tests spec reference refinement properties
	$(BIN)/ruff format --check src tests spec reference refinement properties

typecheck: $(STAMP)
	$(BIN)/mypy --strict -p rmqspec.spec
	$(BIN)/mypy -p rmqspec

pytest: $(STAMP)
	$(BIN)/pytest

bench: $(STAMP)
	$(BIN)/rmqspec bench

clean:
	rm -rf $(VENV) build src/*.egg-info
