"""Load a fine-tuned token classifier and extract spans with it; the prediction command.

:class:`TokenClassifier` is what the scorer's prediction files, the evaluation stages and
the adversarial attacks (as the victim) use. Words are the project's words; a word's
label is the prediction at its first subword piece. Texts longer than the model's window
are split into overlapping word windows (:mod:`src.finetune.windows`).

Usage::

    python -m src.finetune.predict --checkpoint models/finetuned/minilm-timex \\
        --input data/prepared/timex/base.jsonl --output predictions.jsonl
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from src.cli import setup_logging
from src.data.schema import Record, Span, read_records
from src.data.text import word_offsets
from src.finetune.bio import OUTSIDE, TAG_SUFFIX, tag_set
from src.finetune.windows import merge_window_spans, plan_windows, window_spans

logger = logging.getLogger(__name__)

LABEL_MAP_FILE = "label_map.json"
DEFAULT_MAX_LENGTH = 512
DEFAULT_OVERLAP_WORDS = 32


def save_label_map(directory: str | Path, labels: list[str], span_label: str, max_length: int, **extra: Any) -> Path:
    """Write what inference needs beside the weights: tag order, span label, window size."""
    path = Path(directory) / LABEL_MAP_FILE
    payload = {"labels": list(labels), "span_label": span_label, "max_length": int(max_length), **extra}
    path.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    return path


def _span_label_from_tags(labels: list[str]) -> str:
    suffixes = {tag[2:] for tag in labels if tag != OUTSIDE}
    matches = [label for label, suffix in TAG_SUFFIX.items() if {suffix} == suffixes]
    if len(matches) != 1:
        raise ValueError(f"cannot tell the span label from the tags {labels}")
    return matches[0]


class TokenClassifier:
    """A word-level BIO tagger over a Hugging Face token-classification model."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        labels: list[str],
        span_label: str,
        max_length: int = DEFAULT_MAX_LENGTH,
        device: str = "cpu",
        overlap_words: int = DEFAULT_OVERLAP_WORDS,
        outside_bias: float = 0.0,
    ):
        if sorted(labels) != sorted(tag_set(span_label)):
            raise ValueError(f"labels {labels} do not match the tag set of {span_label}: {tag_set(span_label)}")
        self.model = model.to(device).eval()
        self.tokenizer = tokenizer
        self.tokenizer.padding_side = "right"
        self.labels = list(labels)
        self.span_label = span_label
        self.max_length = int(max_length)
        self.device = device
        self.overlap_words = overlap_words
        self.outside_bias = float(outside_bias)
        self._outside = self.labels.index(OUTSIDE)

    @classmethod
    def load(cls, checkpoint_dir: str | Path, device: str = "cpu") -> TokenClassifier:
        """Load a checkpoint written by :mod:`src.finetune.train` (or any compatible folder)."""
        from transformers import AutoModelForTokenClassification, AutoTokenizer

        directory = Path(checkpoint_dir)
        if not (directory / "config.json").is_file():
            raise FileNotFoundError(f"{directory} is not a model checkpoint (no config.json)")
        model = AutoModelForTokenClassification.from_pretrained(directory)
        tokenizer = AutoTokenizer.from_pretrained(directory)
        config_labels = [model.config.id2label[i] for i in range(model.config.num_labels)]
        map_path = directory / LABEL_MAP_FILE
        if map_path.is_file():
            label_map = json.loads(map_path.read_text(encoding="utf-8"))
            labels, span_label = label_map["labels"], label_map["span_label"]
            max_length = int(label_map.get("max_length", DEFAULT_MAX_LENGTH))
            outside_bias = float(label_map.get("outside_bias", 0.0))
            if labels != config_labels:
                raise ValueError(f"{map_path}: labels {labels} differ from the model config's {config_labels}")
        else:
            labels, span_label = config_labels, _span_label_from_tags(config_labels)
            max_length = model_window(model, tokenizer)
            outside_bias = 0.0
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        return cls(model, tokenizer, labels, span_label, max_length, device, outside_bias=outside_bias)

    @property
    def max_pieces(self) -> int:
        """Subword pieces of text that fit beside the special tokens."""
        return self.max_length - self.tokenizer.num_special_tokens_to_add(pair=False)

    def piece_counts(self, batch: list[list[str]]) -> list[list[int]]:
        """Subword pieces per word, without special tokens."""
        if not batch:
            return []
        encoding = self.tokenizer(batch, is_split_into_words=True, add_special_tokens=False)
        counts = []
        for i, sentence in enumerate(batch):
            per_word = [0] * len(sentence)
            for word_id in encoding.word_ids(i):
                if word_id is not None:
                    per_word[word_id] += 1
            counts.append(per_word)
        return counts

    def predict_word_probs(self, batch: list[list[str]]) -> list[np.ndarray]:
        """Label probabilities per word, ``(n_words, n_labels)`` per sentence.

        A word's probabilities are those of its first piece; a word the tokenizer maps to
        no piece at all is certainly ``O``. Sentences must fit the model's window
        (:meth:`predict_spans` windows longer texts); a longer one is a ValueError.
        """
        import torch

        out: list[np.ndarray | None] = [None] * len(batch)
        nonempty = [i for i, sentence in enumerate(batch) if sentence]
        for i in range(len(batch)):
            if not batch[i]:
                out[i] = np.zeros((0, len(self.labels)), dtype=np.float32)
        if not nonempty:
            return out  # type: ignore[return-value]
        sentences = [list(batch[i]) for i in nonempty]
        encoding = self.tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
        if encoding["input_ids"].shape[1] > self.max_length:
            lengths = encoding["attention_mask"].sum(dim=1).tolist()
            worst = max(range(len(lengths)), key=lambda k: lengths[k])
            raise ValueError(
                f"sentence {nonempty[worst]} of the batch has {lengths[worst]} pieces, more than the model's "
                f"window of {self.max_length}; use predict_spans, which splits long texts into windows"
            )
        inputs = {k: v.to(self.device) for k, v in encoding.items() if k in ("input_ids", "attention_mask")}
        with torch.inference_mode():
            logits = self.model(**inputs).logits
        probs = torch.softmax(logits.float(), dim=-1).cpu().numpy()
        for row, i in enumerate(nonempty):
            word_probs = np.zeros((len(batch[i]), len(self.labels)), dtype=np.float32)
            word_probs[:, self._outside] = 1.0
            seen: set[int] = set()
            for position, word_id in enumerate(encoding.word_ids(row)):
                if word_id is not None and word_id not in seen:
                    seen.add(word_id)
                    word_probs[word_id] = probs[row, position]
            out[i] = word_probs
        return out  # type: ignore[return-value]

    def predict_tags(self, batch: list[list[str]]) -> list[list[str]]:
        """The most probable tag of every word, ``O`` weighted by ``exp(outside_bias)``: the
        decision threshold calibrated on validation (> 0 trades recall for precision)."""
        tags = []
        for probs in self.predict_word_probs(batch):
            if self.outside_bias:
                probs = probs.copy()
                probs[:, self._outside] *= np.exp(self.outside_bias)
            tags.append([self.labels[k] for k in probs.argmax(axis=1)])
        return tags

    def predict_span_objects(
        self, records: list[Record], batch_size: int = 32, progress: bool = False
    ) -> list[list[Span]]:
        """Predicted spans (document offsets) per record, long texts windowed and merged."""
        offsets = [word_offsets(record.text) for record in records]
        words = [[record.text[s:e] for s, e in record_offsets] for record, record_offsets in zip(records, offsets)]
        counts = self.piece_counts(words)
        jobs: list[tuple[int, Any]] = []  # (record index, window)
        for index, record_counts in enumerate(counts):
            for window in plan_windows(record_counts, self.max_pieces, self.overlap_words):
                jobs.append((index, window))
        # Similar lengths in one batch pad less; results are put back in job order.
        order = sorted(range(len(jobs)), key=lambda j: sum(counts[jobs[j][0]][jobs[j][1].start : jobs[j][1].end]))
        tags: list[list[str] | None] = [None] * len(jobs)
        batches = range(0, len(order), batch_size)
        if progress:
            batches = tqdm(batches, desc="predict", unit="batch")
        for first in batches:
            chunk = order[first : first + batch_size]
            chunk_words = [words[jobs[j][0]][jobs[j][1].start : jobs[j][1].end] for j in chunk]
            for j, predicted in zip(chunk, self.predict_tags(chunk_words)):
                tags[j] = predicted
        candidates: list[list[tuple[Span, float]]] = [[] for _ in records]
        for (index, window), window_tags in zip(jobs, tags):
            record = records[index]
            candidates[index].extend(window_spans(record.text, offsets[index], window, window_tags, self.span_label))
        return [merge_window_spans(found) for found in candidates]

    def predict_spans(self, records: list[Record], batch_size: int = 32, progress: bool = False) -> list[list[str]]:
        """Predicted span strings per record, in text order (the prediction-file items)."""
        return [[span.text for span in spans] for spans in self.predict_span_objects(records, batch_size, progress)]


def model_window(model: Any, tokenizer: Any, cap: int = DEFAULT_MAX_LENGTH) -> int:
    """Pieces per input: the smallest of ``cap``, the tokenizer's limit and the position table."""
    limits = [cap, int(min(tokenizer.model_max_length, 10**9))]
    for key in ("max_position_embeddings", "n_positions"):
        value = getattr(model.config, key, None)
        if isinstance(value, int) and value > 0:
            limits.append(value)
    return min(limits)


def write_predictions(path: str | Path, records: list[Record], predictions: list[list[str]]) -> int:
    """Write the scorer's prediction file: one ``{"id", "predictions"}`` line per record."""
    if len(records) != len(predictions):
        raise ValueError(f"{len(records)} records but {len(predictions)} prediction lists")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        for record, predicted in zip(records, predictions):
            handle.write(json.dumps({"id": record.id, "predictions": predicted}, ensure_ascii=False) + "\n")
    return len(records)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Predict spans with a fine-tuned token classifier.")
    parser.add_argument("--checkpoint", required=True, help="checkpoint folder written by src.finetune.train")
    parser.add_argument("--input", required=True, help="JSONL dataset in the project's data contract")
    parser.add_argument("--output", required=True, help="prediction file to write")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    args = parser.parse_args(argv)
    if args.threads is not None:
        import torch

        torch.set_num_threads(args.threads)
    setup_logging(timestamps=True)
    records = read_records(args.input)
    classifier = TokenClassifier.load(args.checkpoint, device=args.device)
    predictions = classifier.predict_spans(records, batch_size=args.batch_size, progress=True)
    count = write_predictions(args.output, records, predictions)
    logger.info("wrote %d predictions to %s", count, args.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
