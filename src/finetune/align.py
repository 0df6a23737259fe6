"""Word-level BIO tags -> labels on subword pieces, the training targets.

Every piece of a word gets the word's label (so a ``B-`` word split in three pieces trains
three ``B-`` positions); special and padding tokens get -100, which the loss ignores.
Words are fed pre-split (``is_split_into_words=True``) and pieces are mapped back with
the fast tokenizer's ``word_ids()``. Byte-level BPE tokenizers (RoBERTa, GPT-2,
SmolLM2) must add a prefix space to each word, or mid-sentence words are encoded unlike
in pretraining ("world" instead of "Ġworld"); :func:`src.finetune.models.load_tokenizer`
sets that up. Evaluation reads each word's prediction at its first piece only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

IGNORE_INDEX = -100


def align_labels(word_ids: list[int | None], word_label_ids: list[int]) -> list[int]:
    """Label id per piece: the label of the piece's word, IGNORE_INDEX for special tokens."""
    return [IGNORE_INDEX if word_id is None else word_label_ids[word_id] for word_id in word_ids]


def first_piece_positions(word_ids: list[int | None]) -> list[int]:
    """Position of each word's first piece, for words 0..last word in the encoding.

    A word the tokenizer turned into no piece at all gets -1 (read as ``O``).
    """
    present = [word_id for word_id in word_ids if word_id is not None]
    positions = [-1] * (max(present) + 1 if present else 0)
    for position, word_id in enumerate(word_ids):
        if word_id is not None and positions[word_id] == -1:
            positions[word_id] = position
    return positions


@dataclass
class EncodedSentence:
    """One tagged sentence ready for the Trainer, and what evaluation needs to read it back.

    ``features`` holds the tokenizer's outputs plus ``labels``; ``first_pieces`` and
    ``tags`` cover the words that survived truncation (all of them unless the sentence is
    longer than ``max_length``).
    """

    features: dict[str, list[int]]
    first_pieces: list[int]
    tags: list[str]


def encode_tagged(
    tokenizer: Any,
    words_batch: list[list[str]],
    tags_batch: list[list[str]],
    label2id: dict[str, int],
    max_length: int,
) -> list[EncodedSentence]:
    """Tokenize pre-split sentences and align their tags to pieces (truncating to ``max_length``)."""
    if len(words_batch) != len(tags_batch):
        raise ValueError(f"{len(words_batch)} sentences but {len(tags_batch)} tag lists")
    if not tokenizer.is_fast:
        raise TypeError(f"{type(tokenizer).__name__} is not a fast tokenizer: word_ids() is needed for alignment")
    encoding = tokenizer(words_batch, is_split_into_words=True, truncation=True, max_length=max_length)
    out: list[EncodedSentence] = []
    for i, (words, tags) in enumerate(zip(words_batch, tags_batch)):
        if len(words) != len(tags):
            raise ValueError(f"sentence {i}: {len(words)} words but {len(tags)} tags")
        try:
            label_ids = [label2id[tag] for tag in tags]
        except KeyError as exc:
            raise ValueError(f"sentence {i}: tag {exc.args[0]!r} is not one of {sorted(label2id)}") from None
        word_ids = encoding.word_ids(i)
        features = {key: list(values[i]) for key, values in encoding.items()}
        features["labels"] = align_labels(word_ids, label_ids)
        positions = first_piece_positions(word_ids)
        out.append(EncodedSentence(features, positions, list(tags[: len(positions)])))
    return out
