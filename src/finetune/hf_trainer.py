"""What the Hugging Face Trainer is given: encoded sentences, seqeval metrics, its arguments,
and a Trainer subclass that keeps evaluation in order and groups training by length."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from src.data.schema import Record
from src.finetune.align import EncodedSentence, encode_tagged
from src.finetune.bio import record_to_bio, tag_set
from src.finetune.train_config import TrainConfig


class SentenceDataset:
    """Encoded sentences as the list-like dataset the Trainer iterates."""

    def __init__(self, encoded: list[EncodedSentence]):
        self.encoded = encoded

    def __len__(self) -> int:
        return len(self.encoded)

    def __getitem__(self, index: int) -> dict[str, list[int]]:
        return self.encoded[index].features


def encode_records(records: list[Record], label: str, tokenizer: Any, max_length: int) -> list[EncodedSentence]:
    """BIO-tag records (words split at gold boundaries) and align tags to pieces."""
    label2id = {tag: i for i, tag in enumerate(tag_set(label))}
    words_batch, tags_batch = [], []
    for record in records:
        words, _, tags = record_to_bio(record, label)
        words_batch.append(words)
        tags_batch.append(tags)
    return encode_tagged(tokenizer, words_batch, tags_batch, label2id, max_length)


def make_compute_metrics(encoded: list[EncodedSentence], labels: list[str]):
    """Entity precision/recall/F1 (seqeval) from first-piece predictions of each word."""
    from seqeval.metrics import f1_score, precision_score, recall_score

    def compute(prediction: Any) -> dict[str, float]:
        logits = prediction.predictions[0] if isinstance(prediction.predictions, tuple) else prediction.predictions
        best = logits.argmax(axis=-1)
        gold, predicted = [], []
        for row, sentence in enumerate(encoded):
            gold.append(sentence.tags)
            predicted.append([labels[best[row, p]] if p >= 0 else "O" for p in sentence.first_pieces])
        return {
            "precision": precision_score(gold, predicted, zero_division=0),
            "recall": recall_score(gold, predicted, zero_division=0),
            "f1": f1_score(gold, predicted, zero_division=0),
        }

    return compute


def training_arguments(config: TrainConfig, plan: dict[str, int], checkpoint_dir: Path, run_name: str) -> Any:
    """The Trainer's arguments: AdamW + linear decay, step-wise eval/save, best model by val F1."""
    from transformers import TrainingArguments

    return TrainingArguments(
        output_dir=str(checkpoint_dir),
        learning_rate=config.learning_rate,
        weight_decay=config.weight_decay,
        optim="adamw_torch",
        lr_scheduler_type="linear",
        warmup_steps=plan["warmup_steps"],
        num_train_epochs=config.num_train_epochs,
        max_steps=config.max_steps,
        per_device_train_batch_size=config.train_batch_size,
        per_device_eval_batch_size=config.eval_batch_size,
        group_by_length=config.group_by_length,
        eval_strategy="steps",
        eval_steps=plan["eval_steps"],
        save_strategy="steps",
        save_steps=plan["eval_steps"],
        save_total_limit=2,
        save_only_model=True,
        load_best_model_at_end=True,
        metric_for_best_model="f1",
        greater_is_better=True,
        logging_strategy="steps",
        logging_steps=config.logging_steps,
        logging_first_step=True,
        report_to="none",  # MLflow: one run per training, opened by train_classifier (mlflow_metrics_callback)
        run_name=run_name,
        seed=config.seed,
        data_seed=config.seed,
        full_determinism=config.full_determinism,
        disable_tqdm=False,
        dataloader_num_workers=0,
    )


def in_order_trainer_class(length_group_batches: int = 4) -> type:
    """The Trainer with evaluation batches in the validation set's order: ``group_by_length``
    also reorders evaluation in transformers 4.57, but :func:`make_compute_metrics` maps the
    predictions back to the validation sentences by position (reordered, every F1 read 0.0).

    Length grouping sorts windows of ``length_group_batches`` batches (``finetune.length_group_batches``;
    transformers' default, 50, sorts 800 sentences at once: the short target-free ones then
    train in batches of their own)."""
    from torch.utils.data import SequentialSampler
    from transformers import Trainer
    from transformers.trainer_pt_utils import LengthGroupedSampler, get_length_grouped_indices

    class WindowedLengthGroups(LengthGroupedSampler):
        def __iter__(self):
            grouped = get_length_grouped_indices(self.lengths, self.batch_size, length_group_batches, self.generator)
            return iter(grouped)

    class InOrderEvaluation(Trainer):
        def _get_eval_sampler(self, eval_dataset):
            return SequentialSampler(eval_dataset)

        def _get_train_sampler(self, train_dataset=None):
            if not self.args.group_by_length:
                return super()._get_train_sampler(train_dataset)
            dataset = train_dataset if train_dataset is not None else self.train_dataset
            lengths = [len(dataset[i]["input_ids"]) for i in range(len(dataset))]
            return WindowedLengthGroups(self.args.train_batch_size, lengths=lengths)

    return InOrderEvaluation
