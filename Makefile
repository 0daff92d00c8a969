# One command to run the bot, one to test it; each sets itself up on a fresh machine.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Running needs the package only; testing, linting and benchmarks also its dev tools.
RUN_STAMP := $(VENV)/.installed-run
STAMP := $(VENV)/.installed

.PHONY: run test lint bench bench-memory migrate doctor sync console clean

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

# Both memory benchmarks (docs/memory.md) on the endpoint the bot is configured with:
# memory_eval.py's fixture, then LoCoMo (LOCOMO=path/to/locomo10.json, else the fixture;
# LOCOMO_ARGS="--sessions 3 --max-questions 10 --out locomo.json" and so on).
# SCRIPTED=1: the scripted server instead of a model.
bench-memory: $(STAMP)
	$(BIN)/python benchmarks/memory_eval.py $(if $(SCRIPTED),--dry-run)
	$(BIN)/python benchmarks/locomo.py $(LOCOMO) $(if $(SCRIPTED),--scripted) $(LOCOMO_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
