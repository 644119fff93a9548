"""The default model's tokenizer: byte-level BPE with the rewriter's special tokens.

Byte-level BPE (as in GPT-2) covers every Unicode string without an unknown token. It is
trained with the ``tokenizers`` library and saved as a ``PreTrainedTokenizerFast`` so
``AutoTokenizer.from_pretrained(dir)`` loads it offline.
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

PAD, DOC, REWRITE, END, MASK = "<|pad|>", "<|doc|>", "<|rewrite|>", "<|end|>", "<|mask|>"
SPECIAL_TOKENS = [PAD, DOC, REWRITE, END, MASK]  # ids 0..4 in this order


def train_tokenizer(texts: Iterable[str], *, vocab_size: int) -> PreTrainedTokenizerFast:
    """Train byte-level BPE on ``texts``; special tokens take ids 0..4."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  min_frequency=2, show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    return wrap(tok)


def wrap(tok: Tokenizer) -> PreTrainedTokenizerFast:
    """A transformers tokenizer around ``tok`` with EOS = <|end|> and PAD = <|pad|>."""
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token=END, pad_token=PAD,
        additional_special_tokens=[DOC, REWRITE, MASK], clean_up_tokenization_spaces=False,
        model_max_length=2048)
