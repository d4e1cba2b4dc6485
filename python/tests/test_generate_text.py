"""Text prompts: plan.generate(text, tokenizer=...) and `reforge generate --prompt TEXT --tokenizer
tokenizer.model` on the real GPT-2 generation export (vocabulary 96), with the tiny real tokenizers of
models/tokenizers (scripts/models/make_tokenizers.py: a sentencepiece model and a byte-level BPE
tokenizer.json of 96 tokens each). The references are the tokenizer libraries themselves: a text
prompt generates what its ids (encoded by `sentencepiece` / `tokenizers`) generate, and the text is
the library's decoding of prompt + new tokens less the prompt's text; streamed pieces concatenate to
it, a character of several byte tokens coming whole."""

import json
import subprocess
import sys

import numpy as np
import pytest

spm = pytest.importorskip("sentencepiece")
Tokenizer = pytest.importorskip("tokenizers").Tokenizer

import reforge
from reforge import text as rtext
from conftest import CLI, ROOT, cli_error, cli_output

MODEL = ROOT / "models" / "hf" / "gpt2_generate" / "A" / "model.onnx"
SPM = ROOT / "models" / "tokenizers" / "sentencepiece" / "tokenizer.model"
BPE = ROOT / "models" / "tokenizers" / "bpe" / "tokenizer.json"
PROMPT = "Once upon a time the robot"
N = 24


@pytest.fixture(scope="module")
def plan():
    return reforge.build(str(MODEL), threads=1)


@pytest.fixture(scope="module")
def sp():
    return spm.SentencePieceProcessor(model_file=str(SPM))


@pytest.fixture(scope="module")
def bpe():
    return Tokenizer.from_file(str(BPE))


def sp_ids(sp, text, bos=True):
    return ([sp.bos_id()] if bos else []) + sp.encode(text)


def continuation(decode, prompt_ids, new_ids):
    """The text new_ids add to prompt_ids, as transformers' pipeline cuts it (return_full_text=False)."""
    return decode(prompt_ids + new_ids)[len(decode(prompt_ids)):]


def new_tokens(row):
    return [int(t) for t in row if t >= 0]


# ---- Python ----


def test_sentencepiece_text_equals_its_ids_decoded(plan, sp):
    ids = sp_ids(sp, PROMPT)
    want = new_tokens(plan.generate(ids, max_new_tokens=N, stop_tokens=[sp.eos_id()])[0])
    assert len(want) > 1
    for tok in (str(SPM), SPM.parent, sp):  # a file, a folder holding tokenizer.model, the processor
        got = plan.generate(PROMPT, max_new_tokens=N, tokenizer=tok)
        assert isinstance(got, str)
        assert got == continuation(sp.decode, ids, want)
    # Without special tokens: no BOS before the prompt.
    bare = new_tokens(plan.generate(sp_ids(sp, PROMPT, bos=False), max_new_tokens=N, stop_tokens=[2])[0])
    got = plan.generate(PROMPT, max_new_tokens=N, tokenizer=SPM, add_special_tokens=False)
    assert got == continuation(sp.decode, sp_ids(sp, PROMPT, bos=False), bare)


def test_tokenizer_json_text_equals_its_ids_decoded(plan, bpe):
    for prompt in (PROMPT, "日本 café"):
        ids = bpe.encode(prompt).ids
        want = new_tokens(plan.generate(ids, max_new_tokens=N)[0])
        for tok in (str(BPE), BPE.parent, bpe):
            assert plan.generate(prompt, max_new_tokens=N, tokenizer=tok) == continuation(bpe.decode, ids, want)


def test_several_text_prompts_give_what_each_gives_alone(plan):
    prompts = ["The robot", "Once upon a time", "café"]
    both = plan.generate(prompts, max_new_tokens=12, tokenizer=SPM)
    assert isinstance(both, list) and len(both) == 3
    assert both == [plan.generate(p, max_new_tokens=12, tokenizer=SPM) for p in prompts]


def test_streamed_pieces_concatenate_to_the_text(plan, bpe):
    for tok in (SPM, BPE):
        seen = []
        got = plan.generate(["The robot", PROMPT], max_new_tokens=N, tokenizer=tok, callback=lambda i, s: seen.append((i, s)))
        for i in range(2):
            assert "".join(s for j, s in seen if j == i) == got[i]
        assert all(s for _, s in seen)
    # Sampled at a high temperature the model makes byte tokens of multi-byte characters, in and
    # out of order: the stream still gives exactly the library's decoding of the whole sequence.
    ids = bpe.encode("日本 café").ids
    for seed in range(8):
        pieces = []
        got = plan.generate("日本 café", max_new_tokens=40, tokenizer=BPE, temperature=3.0, seed=seed,
                            callback=lambda i, s: pieces.append(s))
        new = new_tokens(plan.generate(ids, max_new_tokens=40, temperature=3.0, seed=seed)[0])
        assert "".join(pieces) == got == continuation(bpe.decode, ids, new)


def test_stream_waits_for_a_whole_character(bpe):
    # "日" and "本" are three byte tokens each in the tiny byte-level BPE, "é" two.
    tok = rtext.tokenizer_of(BPE)
    ids = bpe.encode("日本 café").ids
    assert len(ids) == 12
    stream = rtext.text_stream(tok, [])
    pieces = [stream.push(t) for t in ids]
    assert pieces == ["", "", "日", "", "", "本", " ", "c", "a", "f", "", "é"]
    assert stream.finish() == "" and stream.text == "日本 café"
    # Token by token decoding, which the stream avoids, gives replacement characters.
    assert "\ufffd" in "".join(bpe.decode([t]) for t in ids)
    # An unfinished character at the end comes out at finish(), as the library decodes it.
    stream = rtext.text_stream(tok, [])
    assert [stream.push(t) for t in ids[:2]] == ["", ""]
    assert stream.finish() == bpe.decode(ids[:2]) == "\ufffd"


def test_stream_keeps_the_space_after_the_prompt(sp):
    # Sentencepiece drops the leading space of the first piece it decodes: decoding the new tokens
    # alone would lose the space between the prompt and " robot".
    tok = rtext.tokenizer_of(sp)
    prompt, new = sp_ids(sp, "Once upon a time"), sp.encode(" the robot")
    stream = rtext.text_stream(tok, prompt)
    text = "".join(stream.push(t) for t in new) + stream.finish()
    assert text == " the robot" and sp.decode(new) == "the robot"


def test_stop_tokens_as_text_and_the_end_of_sequence(plan, sp, bpe):
    ids = sp_ids(sp, PROMPT)
    free = new_tokens(plan.generate(ids, max_new_tokens=N)[0])
    he = sp.piece_to_id("he")
    assert he in free
    want = new_tokens(plan.generate(ids, max_new_tokens=N, stop_tokens=[he, sp.eos_id()])[0])
    assert want[-1] == he
    got = plan.generate(PROMPT, max_new_tokens=N, tokenizer=SPM, stop_tokens=["he"])
    assert got == continuation(sp.decode, ids, want)
    # The sentencepiece model's </s> ends a sequence without being asked: ids prompts with the
    # tokenizer stop there too, and keep it.
    with_eos = plan.generate(ids, max_new_tokens=N, tokenizer=SPM)
    assert new_tokens(with_eos[0]) == new_tokens(plan.generate(ids, max_new_tokens=N, stop_tokens=[2])[0])
    # A bare tokenizer.json names no end of sequence: generation runs to max_new_tokens.
    bids = bpe.encode(PROMPT).ids
    assert len(new_tokens(plan.generate(bids, max_new_tokens=N, tokenizer=BPE)[0])) == N


def test_a_callback_returning_false_ends_its_prompt(plan):
    seen = []

    def first_piece_only(i, piece):
        seen.append(piece)
        return False

    got = plan.generate(PROMPT, max_new_tokens=N, tokenizer=SPM, callback=first_piece_only)
    assert len(seen) == 1 and got == seen[0]


def test_text_errors(plan, monkeypatch, tmp_path):
    with pytest.raises(reforge.InvalidInput, match="text prompts need tokenizer="):
        plan.generate("hello")
    with pytest.raises(reforge.InvalidInput, match="all text or all token ids"):
        plan.generate(["hello", [1, 2]], tokenizer=SPM)
    with pytest.raises(reforge.InvalidInput, match="give tokenizer= to look it up"):
        plan.generate([1, 2, 3], stop_tokens=["</s>"])
    with pytest.raises(reforge.InvalidInput, match="not in the tokenizer's vocabulary"):
        plan.generate("hello", tokenizer=SPM, stop_tokens=["<nope>"])
    with pytest.raises(reforge.InvalidInput, match="holds neither tokenizer.json nor tokenizer.model"):
        plan.generate("hello", tokenizer=tmp_path)
    with pytest.raises(FileNotFoundError):
        plan.generate("hello", tokenizer=tmp_path / "tokenizer.json")
    with pytest.raises(reforge.InvalidInput, match="neither a tokenizer.json nor a sentencepiece model"):
        plan.generate("hello", tokenizer=MODEL)
    (tmp_path / "broken.json").write_text('{"model": 1}')
    with pytest.raises(reforge.InvalidInput, match="not a tokenizer.json that `tokenizers` reads"):
        plan.generate("hello", tokenizer=tmp_path / "broken.json")
    with pytest.raises(TypeError, match="tokenizer must be"):
        plan.generate("hello", tokenizer=42)
    with pytest.raises(reforge.Error, match="token 96 is not in the tokenizer's vocabulary"):
        rtext.tokenizer_of(BPE).decode([5, 96])
    # A tokenizer file without its package: the error names the package to install.
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    with pytest.raises(ImportError, match="pip install tokenizers"):
        plan.generate("hello", tokenizer=BPE)
    monkeypatch.setitem(sys.modules, "sentencepiece", None)
    with pytest.raises(ImportError, match="pip install sentencepiece"):
        plan.generate("hello", tokenizer=SPM)


def test_a_transformers_tokenizer(plan, bpe):
    transformers = pytest.importorskip("transformers")
    tok = transformers.PreTrainedTokenizerFast(tokenizer_file=str(BPE), eos_token="<|endoftext|>")
    ids = bpe.encode(PROMPT).ids
    want = new_tokens(plan.generate(ids, max_new_tokens=N, stop_tokens=[0])[0])
    assert plan.generate(PROMPT, max_new_tokens=N, tokenizer=tok) == continuation(bpe.decode, ids, want)


# ---- CLI ----


def cli_json(*args):
    return json.loads(cli_output("generate", MODEL, "--threads", "1", "--json", "-q", *args))


def test_cli_prompt_encodes_as_sentencepiece_does(sp, tmp_path):
    ids = sp_ids(sp, PROMPT)
    np.save(tmp_path / "ids.npy", np.array(ids, dtype=np.int64))
    by_ids = cli_json("--input-ids", tmp_path / "ids.npy", "--max-new-tokens", N, "--stop", sp.eos_id())
    by_text = cli_json("--prompt", PROMPT, "--tokenizer", SPM, "--max-new-tokens", N)
    assert by_text["prompt_tokens"] == [ids] and "prompt_tokens" not in by_ids
    assert by_text["tokens"] == by_ids["tokens"] and "text" not in by_ids
    assert by_text["text"] == [continuation(sp.decode, ids, by_ids["tokens"][0])]
    # Streamed on stdout as made, the same text.
    out = cli_output("generate", MODEL, "--prompt", PROMPT, "--tokenizer", SPM.parent, "--max-new-tokens", N,
                     "--threads", "1", "-q")
    assert out == by_text["text"][0] + "\n"
    # --no-bos: the ids without the BOS; token ids with --tokenizer print text too.
    bare = sp_ids(sp, PROMPT, bos=False)
    np.save(tmp_path / "bare.npy", np.array(bare, dtype=np.int64))
    no_bos = cli_json("--prompt", PROMPT, "--tokenizer", SPM, "--no-bos", "--max-new-tokens", N)
    ids_text = cli_json("--input-ids", tmp_path / "bare.npy", "--tokenizer", SPM, "--max-new-tokens", N)
    assert no_bos["prompt_tokens"] == [bare]
    assert no_bos["tokens"] == ids_text["tokens"] and no_bos["text"] == ids_text["text"]


def test_cli_text_equals_python_text(plan):
    prompts = ["The robot", "café 日本"]
    got = cli_json(*[a for p in prompts for a in ("--prompt", p)], "--tokenizer", SPM, "--max-new-tokens", N)
    assert got["text"] == plan.generate(prompts, max_new_tokens=N, tokenizer=SPM)
    sp = spm.SentencePieceProcessor(model_file=str(SPM))
    assert got["prompt_tokens"] == [sp_ids(sp, p) for p in prompts]
    out = cli_output("generate", MODEL, "--prompt", prompts[0], "--prompt", prompts[1], "--tokenizer", SPM,
                     "--max-new-tokens", N, "--threads", "1", "-q")
    assert out == "".join(t + "\n" for t in got["text"])


def test_cli_text_errors(tmp_path):
    msg = cli_error("generate", MODEL, "--prompt", "hello", "--tokenizer", BPE)
    assert "tokenizer.json; the CLI reads sentencepiece models (tokenizer.model)" in msg
    assert "plan.generate" in msg
    assert "tokenizer.json" in cli_error("generate", MODEL, "--prompt", "hello", "--tokenizer", BPE.parent)
    assert "--prompt needs --tokenizer" in cli_error("generate", MODEL, "--prompt", "hello")
    assert "no prompts" in cli_error("generate", MODEL)
    assert "both given" in cli_error("generate", MODEL, "--prompt", "a", "--tokenizer", SPM, "--input-ids", "x.npy")
    assert "folder without tokenizer.model" in cli_error("generate", MODEL, "--prompt", "a", "--tokenizer", tmp_path)
    assert "is not a sentencepiece model" in cli_error("generate", MODEL, "--prompt", "a", "--tokenizer", MODEL)
    r = subprocess.run([str(CLI), "generate", str(MODEL), "--help"], capture_output=True, text=True)
    assert "--prompt" in r.stdout and "--tokenizer" in r.stdout


def test_a_tokenizer_smaller_than_the_model_is_refused(plan, tmp_path):
    # A sentencepiece model of 40 pieces for the 96-token model: the tokens it lacks are refused,
    # in both front ends, rather than left out of the text.
    spm.SentencePieceTrainer.train(sentence_iterator=iter(["the robot and the town"] * 8), model_prefix=str(tmp_path / "small"),
                                   vocab_size=20, model_type="char", num_threads=1, minloglevel=2)
    small = tmp_path / "small.model"
    ids = [1] + spm.SentencePieceProcessor(model_file=str(small)).encode("the robot")
    made = new_tokens(plan.generate(ids, max_new_tokens=N, stop_tokens=[2])[0])
    bad = next(t for t in made if t >= 20)
    with pytest.raises(reforge.Error, match="token %d is not in the tokenizer's vocabulary" % bad):
        plan.generate("the robot", max_new_tokens=N, tokenizer=small)
    msg = cli_error("generate", MODEL, "--prompt", "the robot", "--tokenizer", small, "--max-new-tokens", N)
    assert "token %d is not in --tokenizer" % bad in msg
