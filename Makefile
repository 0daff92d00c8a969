# One command to run the bot, one to test it; each sets itself up on a fresh machine.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Running needs the package only; testing, linting and benchmarks also its dev tools.
RUN_STAMP := $(VENV)/.installed-run
STAMP := $(VENV)/.installed

.PHONY: run test lint bench migrate doctor sync console clean

$(RUN_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e .
	touch $(RUN_STAMP)

$(STAMP): $(RUN_STAMP)
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

run: $(RUN_STAMP)
	@$(BIN)/kioku run

migrate: $(RUN_STAMP)
	@$(BIN)/kioku migrate

doctor: $(RUN_STAMP)
	@$(BIN)/kioku doctor

sync: $(RUN_STAMP)
	@$(BIN)/kioku sync

console: $(RUN_STAMP)
	@$(BIN)/kioku console

lint: $(STAMP)
	$(BIN)/ruff check bot tests benchmarks migrations
	$(BIN)/ruff format --check bot tests benchmarks migrations
	$(BIN)/mypy bot

# Workers: see pytest_xdist_auto_num_workers in tests/conftest.py.
test: lint
	$(BIN)/pytest -q -n auto

bench: $(STAMP)
	@$(BIN)/python benchmarks/run_all.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
