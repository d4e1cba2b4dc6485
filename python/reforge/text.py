"""Text prompts for :meth:`reforge.Plan.generate`: the model's tokenizer, read by a maintained
library, and the library's incremental detokenizer for streamed text.

A tokenizer is given as a path (a ``tokenizer.json`` read by Hugging Face's ``tokenizers``
package, a sentencepiece ``tokenizer.model`` read by Google's ``sentencepiece`` package, or a
folder holding either, ``tokenizer.json`` first as transformers prefers it), or as an object: a
``tokenizers.Tokenizer``, a ``sentencepiece.SentencePieceProcessor`` or a ``transformers``
tokenizer. What a file is, is decided by its content (a JSON object is a tokenizer.json), not by
its name. No tokenizer is implemented here: each adapter only calls its library's encode and
decode.

Streaming decodes with ``_reforge.TextStream`` (the library's session/text_stream.h, the scheme
of text-generation-inference and vLLM): a character spread over several tokens (byte-level BPE,
byte fallback) is emitted once complete, and a word's leading space is kept, so that the pieces
concatenate to the returned text.
"""

from __future__ import annotations

import os
from typing import Any, List, Optional

from . import _reforge
from ._reforge import InvalidInput

_KINDS = (
    "a path to a tokenizer.json or tokenizer.model (or a folder holding one), a tokenizers.Tokenizer, "
    "a sentencepiece.SentencePieceProcessor or a transformers tokenizer"
)


def _import(module: str, what: str) -> Any:
    try:
        return __import__(module)
    except ImportError as e:
        raise ImportError("%s needs the `%s` package: pip install %s" % (what, module, module)) from e


class Tokenizer:
    """One tokenizer behind the calls generate makes. ``eos`` is its end-of-sequence id (None when
    it names none: a bare tokenizer.json does not say which token ends a sequence)."""

    eos: Optional[int] = None
    size: int = 0  # ids run from 0 to size - 1

    def encode(self, text: str, add_special_tokens: bool) -> List[int]:
        raise NotImplementedError

    def _decode(self, ids: List[int]) -> str:
        raise NotImplementedError

    def token_id(self, token: str) -> Optional[int]:
        """The id of the token spelled ``token`` ("</s>"), None when the vocabulary lacks it."""
        raise NotImplementedError

    def decode(self, ids: List[int]) -> str:
        """The text of ``ids``, special tokens left out. An id outside the vocabulary is an error,
        not a silent gap: the model and the tokenizer do not belong together."""
        for t in ids:
            if not 0 <= t < self.size:
                raise _reforge.Error(
                    "token %d is not in the tokenizer's vocabulary (%d tokens): is it the model's tokenizer?"
                    % (t, self.size)
                )
        return self._decode(ids)


class _HuggingFace(Tokenizer):
    """A ``tokenizers.Tokenizer`` (a tokenizer.json): its post-processor adds the special tokens."""

    def __init__(self, tok: Any) -> None:
        self._tok = tok
        self.size = tok.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, add_special_tokens: bool) -> List[int]:
        return list(self._tok.encode(text, add_special_tokens=add_special_tokens).ids)

    def _decode(self, ids: List[int]) -> str:
        return self._tok.decode(ids, skip_special_tokens=True)

    def token_id(self, token: str) -> Optional[int]:
        return self._tok.token_to_id(token)


class _SentencePiece(Tokenizer):
    """A ``sentencepiece.SentencePieceProcessor`` (a tokenizer.model): special tokens are its BOS
    before the text, as transformers' Llama tokenizer and the CLI add it."""

    def __init__(self, sp: Any) -> None:
        self._sp = sp
        self.size = sp.get_piece_size()
        self.eos = sp.eos_id() if sp.eos_id() >= 0 else None

    def encode(self, text: str, add_special_tokens: bool) -> List[int]:
        ids = list(self._sp.encode(text))
        return [self._sp.bos_id()] + ids if add_special_tokens and self._sp.bos_id() >= 0 else ids

    def _decode(self, ids: List[int]) -> str:
        return self._sp.decode(ids)

    def token_id(self, token: str) -> Optional[int]:
        i = self._sp.piece_to_id(token)
        return i if self._sp.id_to_piece(i) == token else None


class _Transformers(Tokenizer):
    """A ``transformers`` tokenizer (``AutoTokenizer.from_pretrained(...)``): its own special
    tokens and end-of-sequence id."""

    def __init__(self, tok: Any) -> None:
        self._tok = tok
        self.size = len(tok)
        self.eos = tok.eos_token_id

    def encode(self, text: str, add_special_tokens: bool) -> List[int]:
        return list(self._tok.encode(text, add_special_tokens=add_special_tokens))

    def _decode(self, ids: List[int]) -> str:
        return self._tok.decode(ids, skip_special_tokens=True)

    def token_id(self, token: str) -> Optional[int]:
        i = self._tok.convert_tokens_to_ids(token)
        return i if i is not None and self._tok.convert_ids_to_tokens(i) == token else None


def _from_file(path: str) -> Tokenizer:
    with open(path, "rb") as f:
        head = f.read(4096)
    if head.lstrip()[:1] == b"{":
        tokenizers = _import("tokenizers", "reading a tokenizer.json")
        try:
            return _HuggingFace(tokenizers.Tokenizer.from_file(path))
        except Exception as e:
            raise InvalidInput("tokenizer '%s' is not a tokenizer.json that `tokenizers` reads: %s" % (path, e)) from e
    spm = _import("sentencepiece", "reading a sentencepiece tokenizer.model")
    try:
        return _SentencePiece(spm.SentencePieceProcessor(model_file=path))
    except Exception as e:
        raise InvalidInput(
            "tokenizer '%s' is neither a tokenizer.json nor a sentencepiece model: %s" % (path, str(e).strip())
        ) from e


def tokenizer_of(tokenizer: Any) -> Tokenizer:
    """The :class:`Tokenizer` of ``tokenizer`` (see the module's doc for what it may be)."""
    if isinstance(tokenizer, Tokenizer):
        return tokenizer
    if isinstance(tokenizer, (str, os.PathLike)):
        path = os.fspath(tokenizer)
        if os.path.isdir(path):
            for name in ("tokenizer.json", "tokenizer.model"):
                if os.path.isfile(os.path.join(path, name)):
                    return _from_file(os.path.join(path, name))
            raise InvalidInput("tokenizer folder '%s' holds neither tokenizer.json nor tokenizer.model" % path)
        if not os.path.exists(path):
            raise FileNotFoundError("tokenizer '%s' does not exist" % path)
        return _from_file(path)
    package = type(tokenizer).__module__.split(".")[0]
    if package == "tokenizers" and hasattr(tokenizer, "encode") and hasattr(tokenizer, "token_to_id"):
        return _HuggingFace(tokenizer)
    if package == "sentencepiece" and hasattr(tokenizer, "piece_to_id"):
        return _SentencePiece(tokenizer)
    if all(hasattr(tokenizer, a) for a in ("encode", "decode", "convert_tokens_to_ids", "eos_token_id")):
        return _Transformers(tokenizer)
    raise TypeError("tokenizer must be %s; got %r" % (_KINDS, type(tokenizer)))


def text_stream(tokenizer: Tokenizer, prompt: List[int]) -> "_reforge.TextStream":
    """An incremental detokenizer of the tokens generated after ``prompt`` (session/text_stream.h):
    ``push(token)`` returns the text it completes, ``finish()`` what is held back, ``text`` all."""
    return _reforge.TextStream(tokenizer.decode, list(prompt))


def needs_tokenizer() -> InvalidInput:
    return InvalidInput(
        "text prompts need tokenizer=: %s; or pass token ids (a list of ints, or one list per prompt)" % _KINDS
    )
