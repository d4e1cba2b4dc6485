#!/usr/bin/env python3
"""Two tiny real tokenizers of 96 tokens, the vocabulary of the generation exports
(models/hf/gpt2_generate, qwen2_generate), so that text prompts can be tested end to end: every
token the models make is one of theirs, and a prompt encodes to ids the models accept.

  models/tokenizers/sentencepiece/tokenizer.model   a sentencepiece BPE model (Llama's kind of
                                                    tokenizer.model), trained by Google's library
                                                    (PyPI `sentencepiece`): <unk> 0, <s> 1, </s> 2,
                                                    no normalization, a "▁" prefix (as Llama's)
  models/tokenizers/bpe/tokenizer.json               a byte-level BPE tokenizer.json (GPT-2's kind),
                                                    trained by Hugging Face's library (PyPI
                                                    `tokenizers`): <|endoftext|> 0; its alphabet is
                                                    the corpus's bytes, and a rare character
                                                    ("日", "本": three bytes each) stays split over
                                                    byte tokens, as in GPT-2's vocabulary

Both are trained on the corpus below, single-threaded: a rerun writes the same files.

    .venv/bin/python scripts/models/make_tokenizers.py
"""

import os
import sys

import sentencepiece as spm
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "models", "tokenizers")
VOCAB = 96  # the generation exports' vocabulary

CORPUS = [
    "Once upon a time there was a little robot who lived in a quiet town.",
    "The robot liked to read books and to talk with the people of the town.",
    "Every morning it walked to the market and bought bread, milk and tea.",
    "One day it met a girl who was reading a book about the stars.",
    "She told the robot that the stars were very far away from the town.",
    "The robot wanted to see the stars, so they walked to the hill at night.",
    "They looked at the sky for a long time and talked about the moon.",
    "In the café by the station a naïve cat sat on the table and slept.",
    "The end of the story is a happy one: the robot and the girl are friends.",
    "A short note in another script: 日本.",
]


def train_sentencepiece(path):
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS * 4),
        model_prefix=path[: -len(".model")],
        vocab_size=VOCAB,
        model_type="bpe",
        character_coverage=1.0,
        normalization_rule_name="identity",  # as Llama's: no NFKC table (240 KB) in the model
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=-1,
        num_threads=1,
        minloglevel=2,
    )
    os.remove(path[: -len(".model")] + ".vocab")  # the same pieces, as text: not needed


def train_bpe(path):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<|endoftext|>"], show_progress=False)
    tok.train_from_iterator(CORPUS * 4, trainer)
    tok.save(path)


def main():
    os.makedirs(os.path.join(OUT, "sentencepiece"), exist_ok=True)
    os.makedirs(os.path.join(OUT, "bpe"), exist_ok=True)
    sp_path = os.path.join(OUT, "sentencepiece", "tokenizer.model")
    bpe_path = os.path.join(OUT, "bpe", "tokenizer.json")
    train_sentencepiece(sp_path)
    train_bpe(bpe_path)
    sp = spm.SentencePieceProcessor(model_file=sp_path)
    bpe = Tokenizer.from_file(bpe_path)
    if sp.get_piece_size() != VOCAB or bpe.get_vocab_size() != VOCAB:
        sys.exit("vocabulary sizes %d and %d, not %d" % (sp.get_piece_size(), bpe.get_vocab_size(), VOCAB))
    for line in CORPUS:
        if sp.decode(sp.encode(line)) != line or bpe.decode(bpe.encode(line).ids) != line:
            sys.exit("does not round-trip: %r" % line)
    print("wrote %s (%d bytes), %s (%d bytes)" % (sp_path, os.path.getsize(sp_path), bpe_path, os.path.getsize(bpe_path)))


if __name__ == "__main__":
    main()
