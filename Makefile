# Every target sets itself up: a fresh machine needs only Python 3.10+ (python3).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
DEMO_CONFIG := configs/tiny/llama_tiny_cpu.yaml
DEMO_LOGS := $(CURDIR)/output/tensorboard

.PHONY: install demo test lint bench bench-quick clean

install: $(INSTALLED)

$(INSTALLED): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@

demo: $(INSTALLED)
	$(BIN)/mftb make-data --output output/data/tiny.mindrecord
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/mftb train --config $(DEMO_CONFIG)
	@run=$$(ls -td $(DEMO_LOGS)/llama_tiny_* | head -n 1); \
	echo ""; \
	echo "Run folder: $$run"; \
	echo "View it:    $(CURDIR)/$(BIN)/tensorboard --logdir $(DEMO_LOGS) --host 127.0.0.1 --port 6006"; \
	echo "            then open http://127.0.0.1:6006/"

lint: $(INSTALLED)
	$(BIN)/ruff check mindformers_tbplugin tests benchmarks
	$(BIN)/ruff format --check mindformers_tbplugin tests benchmarks

test: lint
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m pytest

bench: $(INSTALLED)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m benchmarks.run

bench-quick: $(INSTALLED)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m benchmarks.run --quick

clean:
	rm -rf output modules .pytest_cache .ruff_cache
