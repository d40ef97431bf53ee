"""Build the word-level tokenizer that llama-benchy uses, offline, against the example workload.

llama-benchy cuts its prompts out of a text corpus by token count, so it needs a tokenizer; the
default is the benchmarked model's own tokenizer from the Hugging Face Hub, which an offline host
cannot download. This writes a local one instead, whose rule is the example workload's token rule
(one token per whitespace-separated word), so the prompt sizes llama-benchy asks for are exactly the
``prompt_tokens`` the server reports:

- ``tokenizer.json``: a ``tokenizers`` WordLevel model with a WhitespaceSplit pre-tokenizer and a
  vocabulary of the corpus's words (any other word encodes as ``[UNK]``, still one token);
- ``tokenizer_config.json``: what ``transformers.AutoTokenizer`` reads to load it as a fast tokenizer.

llama-benchy 0.4.0 loads ``tokenizer.json`` with the ``tokenizers`` package when ``--tokenizer``
names a directory holding one, and falls back to ``AutoTokenizer``; both work with these files and
``HF_HUB_OFFLINE=1``. The output is deterministic: the same corpus gives byte-identical files.

Run it with the benchmark environment's Python, which has ``tokenizers`` (sparkrun's does not):
    <llama-benchy environment>/bin/python examples/benchmarks/make_tokenizer.py OUT_DIR [--corpus FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tokenizers import Tokenizer, models, pre_tokenizers

UNKNOWN = "[UNK]"
DEFAULT_CORPUS = Path(__file__).with_name("corpus.txt")


def build(corpus: str) -> Tokenizer:
    """A word-level tokenizer over the corpus's whitespace-separated words, ids in sorted word order."""
    vocabulary = {UNKNOWN: 0}
    for word in sorted(set(corpus.split())):
        vocabulary[word] = len(vocabulary)
    tokenizer = Tokenizer(models.WordLevel(vocab=vocabulary, unk_token=UNKNOWN))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.add_special_tokens([UNKNOWN])
    return tokenizer  # No decoder: decoding joins the words with single spaces, as the rule needs.


def write(tokenizer: Tokenizer, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(out_dir / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": UNKNOWN,
        "model_max_length": 1_000_000,
        "clean_up_tokenization_spaces": False,
    }
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write a word-level tokenizer directory for llama-benchy.")
    parser.add_argument("out_dir", type=Path, help="directory to write (created if missing)")
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help="text whose words form the vocabulary")
    args = parser.parse_args(argv)
    tokenizer = build(args.corpus.read_text(encoding="utf-8"))
    write(tokenizer, args.out_dir)
    print(f"wrote {args.out_dir} ({tokenizer.get_vocab_size()} words)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
