# Quick start: `make demo` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test install clean

$(BIN)/tokendp: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# The CPU build of torch; an unpinned torch would pull CUDA packages.
	$(BIN)/pip install --quiet "torch==2.13.0"
	$(BIN)/pip install --quiet -e ".[dev,eval]"
	touch $@

install: $(BIN)/tokendp

demo: install
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(BIN)/tokendp sanitize examples/letter.txt \
		--spans examples/letter.spans.json --epsilon 8

test: install
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
