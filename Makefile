# Every target sets itself up: a fresh machine needs only Python 3.10+ (python3).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Two install stamps: RUNTIME is the package with the pinned framework (what `make demo` needs);
# INSTALLED adds the test extras (pytest, ruff, tensorboardX, jsonschema, selenium) for test, lint and bench.
RUNTIME := $(VENV)/.runtime
INSTALLED := $(VENV)/.installed
DEMO_CONFIG := configs/tiny/llama_tiny_cpu.yaml
DEMO_LOGS := $(CURDIR)/output/tensorboard

.PHONY: install demo demo-moe ranks-demo test test-fast lint bench bench-quick clean browser screenshot compat

install: $(INSTALLED)

# The package requires no MindSpore/MindFormers (users bring theirs); the development environment
# pins a known-good pair here.
DEV_FRAMEWORK := mindspore==2.9.0 mindformers==1.9.0

$(RUNTIME): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e . $(DEV_FRAMEWORK)
	touch $@

$(INSTALLED): $(RUNTIME)
	$(BIN)/python -m pip install --quiet -e '.[test]' $(DEV_FRAMEWORK)
	touch $@

demo: $(RUNTIME)
	$(BIN)/mftb make-data --output output/data/tiny.mindrecord
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/mftb train --config $(DEMO_CONFIG)
	@run=$$(ls -td $(DEMO_LOGS)/llama_tiny_* | head -n 1); \
	echo ""; \
	echo "Run folder: $$run"; \
	echo "View it:    $(CURDIR)/$(BIN)/mftb tensorboard $(DEMO_LOGS)"; \
	echo "            then open the URL it prints (http://127.0.0.1:6006/ when that port is free)"

# A tiny DeepSeek-V3 (MLA, MoE with expert-bias routers, multi-token prediction), MindFormers' mcore model, on
# this CPU: the Ascend-only kernels it builds run as CPU stand-ins (scripts/cpu/), for this demo only.
MOE_CONFIG := configs/tiny/deepseek3_tiny_cpu.yaml

demo-moe: $(RUNTIME)
	$(BIN)/mftb make-data --output output/data/mcore_xy.mindrecord --num_samples 256 --vocab_size 1000 --labels
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python scripts/cpu/train_mcore.py --config $(MOE_CONFIG)
	@run=$$(ls -td $(DEMO_LOGS)/deepseek3_tiny_* | head -n 1); \
	echo ""; \
	echo "Run folder: $$run (loss parts, moe/* per MoE layer, the moe dashboard)"; \
	echo "View it:    $(CURDIR)/$(BIN)/mftb tensorboard $(DEMO_LOGS)"; \
	echo "            then open the URL it prints (http://127.0.0.1:6006/ when that port is free)"

# 8 data-parallel ranks of the tiny LLaMA on this machine (msrun, real collectives): the ranks/matrix records.
RANKS_CONFIG := configs/tiny/llama_tiny_cpu_dp8.yaml
RANKS_OUTPUT := $(CURDIR)/output/ranks_demo

ranks-demo: $(RUNTIME)
	test -f output/data/tiny.mindrecord || $(BIN)/mftb make-data --output output/data/tiny.mindrecord
	rm -rf $(RANKS_OUTPUT)
	port=$$($(BIN)/python -c "from mindformers_tbplugin.viewer.tensorboard_server import any_free_port; print(any_free_port())"); \
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/mftb launch --config $(RANKS_CONFIG) --worker_num 8 \
		--master_port $$port --output_dir $(RANKS_OUTPUT)
	@run=$$(ls -td $(RANKS_OUTPUT)/tensorboard/llama_tiny_dp8_* | head -n 1); \
	echo ""; \
	echo "Run folder: $$run (8 ranks; rank logs in $(RANKS_OUTPUT)/msrun_log/0)"; \
	echo "View it:    $(CURDIR)/$(BIN)/mftb tensorboard $(RANKS_OUTPUT)/tensorboard"; \
	echo "            then open the URL it prints (http://127.0.0.1:6006/ when that port is free)"

lint: $(INSTALLED)
	$(BIN)/ruff check mindformers_tbplugin tests benchmarks
	$(BIN)/ruff format --check mindformers_tbplugin tests benchmarks

test: lint browser
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m pytest

# The unit tests only, in under a minute: no lint, none of the tests marked process (trainings, msrun jobs,
# interpreters that import MindSpore/MindFormers, TensorBoard servers, the browser). `make test` runs them all.
test-fast: $(INSTALLED)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m pytest -m "not process"

# Headless Chromium for tests/jobs/test_browser.py: installed with apt-get when we are root (said first); otherwise
# that test skips.
browser:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "browser: installing chromium and chromium-driver with apt-get for the browser test (it skips without them)"; \
		if { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; } \
			>/dev/null 2>&1; then echo "browser: installed chromium and chromium-driver"; \
		else echo "browser: NOTE: apt-get could not install chromium + chromium-driver: the browser test will SKIP"; fi; \
	else echo "browser: NOTE: no chromium + chromium-driver, and installing them needs root and apt-get: the browser test will SKIP"; fi

# Regenerates the README's pictures: tiny trainings shown by `mftb tensorboard` in headless Chromium.
screenshot: $(INSTALLED) browser
	rm -rf docs/.new && mkdir docs/.new
	MFTB_SCREENSHOTS=$(CURDIR)/docs/.new PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m pytest -q tests/jobs/test_browser.py
	@for picture in tensorboard-scalars.png tensorboard-ranks.png tensorboard-ranks-heatmap.png tensorboard-moe.png; do \
		test -s docs/.new/$$picture || { echo "screenshot: $$picture not taken (browser test skipped?)"; exit 1; }; \
	done
	mv docs/.new/*.png docs/ && rmdir docs/.new

bench: $(INSTALLED)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m benchmarks.run

bench-quick: $(INSTALLED)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m benchmarks.run --quick

clean:
	rm -rf output modules .pytest_cache .ruff_cache

# The tested version matrix: the compat-marked tests in each MindSpore/MindFormers environment
# (tests/compat/README.md), built on first use into .venvs/<env> and reused. A subset:
#   make compat COMPAT_ENVS="mf1.7 mf2.0"
# COMPAT_FLAGS=--discard removes each environment once its tests ran (for CI's clean clone).
COMPAT_ENVS ?= mf1.7 mf1.8 mf1.9 mf1.9-ms2.10 mf2.0 checkout-r1.8 checkout-r1.7
COMPAT_FLAGS ?=

compat:
	PYTHON=$(PYTHON) $(PYTHON) tests/compat/run_matrix.py $(COMPAT_FLAGS) $(COMPAT_ENVS)
