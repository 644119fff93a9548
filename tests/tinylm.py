"""Tiny language models for tests: a byte-level BPE tokenizer trained in well under a second
and 2-layer models built from configs. Cached per process, so every test shares them."""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from pathlib import Path

import torch

# Tiny tensors: one intra-op thread avoids OpenMP hand-offs, which dominate (10-100x) on a
# busy shared CPU.
torch.set_num_threads(1)

CORPUS = [
    "Dear Dr Helen Marsh, I am writing about my patient Mr Tomas Lindqvist.",
    "He was admitted to St James's University Hospital on 2 June 2024 with chest pain.",
    "The applicant was born in 1961 and lives in Leeds. The court held a hearing.",
    "Please review him in clinic in six weeks. Yours sincerely, Dr Amir Patel.",
    "Zoë Ægir paid 45 € in Zürich; naïve café owners said ok.",
]
SPECIAL = ["<|endoftext|>", "<|mask|>", "<|doc|>", "<|rewrite|>", "<s>"]


def _train(add_bos: bool):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=SPECIAL, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS * 5, trainer)
    if add_bos:
        tok.post_processor = processors.TemplateProcessing(
            single="<s> $A", special_tokens=[("<s>", tok.token_to_id("<s>"))])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>",
        bos_token="<s>" if add_bos else None)


@functools.lru_cache(maxsize=None)
def tokenizer(add_bos: bool = False, chat: bool = False):
    tok = _train(add_bos)
    if chat:
        tok.chat_template = (
            "{% for m in messages %}<|doc|>{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}<|rewrite|>{% endif %}")
    return tok


@functools.lru_cache(maxsize=None)
def model(max_positions: int = 512, seed: int = 0, vocab: int = 0):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen2Config(vocab_size=vocab or len(tokenizer()), hidden_size=32, intermediate_size=64,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=max_positions, tie_word_embeddings=False)
    m = Qwen2ForCausalLM(cfg).eval()
    with torch.no_grad():  # a larger init than the default, so that distributions are not flat
        for p in m.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.3)
    return m


def _scratch(prefix: str) -> Path:
    """A temporary folder removed when the test process exits."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


@functools.lru_cache(maxsize=None)
def model_dir(options: str = "") -> Path:
    """A saved model directory (tiny model + tokenizer), with ``options`` as tokendp.json."""
    path = _scratch("tokendp-tiny-")
    model().save_pretrained(path)
    tokenizer().save_pretrained(path)
    if options:
        (path / "tokendp.json").write_text(options)
    return path


class CopyLM(torch.nn.Module):
    """A "perfect copier" causal LM for leakage tests.

    For a row ``[... <|doc|> d_1 .. d_n <|rewrite|> g_1 .. g_k]`` (its last such exchange) its
    next token is d_{k+1} (EOS after d_n) with probability ~1: it rewrites whatever document its row shows, so a
    private token can reach the output only through a row that shows it. Its "KV cache" is
    the token ids themselves (stored as layer-0 keys), so batching, padding, prefix sharing
    and cache selection all go through the real DynamicCache code paths.
    """

    def __init__(self, tokenizer, max_positions: int = 512):
        from transformers import Qwen2Config

        super().__init__()
        self.config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=8, num_hidden_layers=1,
                                  num_attention_heads=1, num_key_value_heads=1,
                                  max_position_embeddings=max_positions)
        self.head = torch.nn.Linear(1, len(tokenizer), bias=False)
        self.doc = tokenizer.convert_tokens_to_ids("<|doc|>")
        self.rewrite = tokenizer.convert_tokens_to_ids("<|rewrite|>")
        self.eos = tokenizer.eos_token_id

    def get_output_embeddings(self):
        return self.head

    def forward(self, input_ids, attention_mask, position_ids, past_key_values, use_cache, logits_to_keep):
        new = input_ids.float()[:, None, :, None]  # (B, 1, L, 1)
        keys, _ = past_key_values.update(new, new, 0)
        ids = keys[:, 0, :, 0].long()  # (B, Ltot)
        logits = torch.full((ids.shape[0], logits_to_keep, self.head.out_features), -20.0)
        for b in range(ids.shape[0]):
            for q in range(logits_to_keep):  # the last positions, each seeing the real ids up to it
                end = ids.shape[1] - logits_to_keep + q + 1
                real = ids[b, :end][attention_mask[b, :end].bool()].tolist()
                if self.rewrite not in real:  # a prefill pass over a shared prefix: logits unused
                    continue
                # the last exchange: a passage read after an earlier one and its rewrite copies itself
                start = len(real) - real[::-1].index(self.doc)
                stop = len(real) - 1 - real[::-1].index(self.rewrite)
                k = start + len(real) - stop - 1
                logits[b, q, real[k] if k < stop else self.eos] = 20.0
        from types import SimpleNamespace
        return SimpleNamespace(logits=logits)


def lora_config(r: int = 4):
    """The LoRA layout tokendp trains (every linear layer but the LM head), tiny rank."""
    from peft import LoraConfig

    return LoraConfig(r=r, lora_alpha=32, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM")


@functools.lru_cache(maxsize=None)
def adapter_dirs(n: int = 3, seed: int = 0) -> tuple[Path, ...]:
    """``n`` LoRA adapters of :func:`model` saved in PEFT's layout, each with random non-zero
    B (a fresh LoRA's B is 0, which would make it the base model)."""
    import copy

    from peft import get_peft_model

    root = _scratch("tokendp-adapters-")
    dirs = []
    for j in range(n):
        torch.manual_seed(1000 * seed + j)
        peft_model = get_peft_model(copy.deepcopy(model()), lora_config())
        with torch.no_grad():
            for name, p in peft_model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0.0, 0.05)
        path = root / f"shard-{j:03d}"
        peft_model.save_pretrained(path)
        dirs.append(path)
    return tuple(dirs)


def ensemble_dir(n: int = 3, seed: int = 0) -> Path:
    """A fresh ensemble directory (manifest + ``n`` tiny adapters) on :func:`model_dir`, as
    ``tokendp ensemble train`` lays it out."""

    from tokendp.ensemble.manifest import Manifest, ShardInfo

    root = _scratch("tokendp-ensemble-")
    shards = []
    for j, src in enumerate(adapter_dirs(n, seed)):
        shutil.copytree(src, root / src.name)
        shards.append(ShardInfo(src.name, records=2 + j, tokens=40 + j))
    Manifest(str(model_dir()), tuple(shards), seed=seed, hyperparameters={"lora_r": 4}).write(root)
    return root


def backend(options: dict, *, copier: bool = False):
    """An HFBackend on the tiny model (name "tiny") or on :class:`CopyLM` (name "copy")."""
    from tokendp.backends import HFBackend

    lm = CopyLM(tokenizer()) if copier else model()
    return HFBackend(lm, tokenizer(), name="copy" if copier else "tiny", options=options)
