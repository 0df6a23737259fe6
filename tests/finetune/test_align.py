"""Subword label alignment for a WordPiece tokenizer (no prefix space) and byte-level BPE ones."""

from __future__ import annotations

import pytest

from src.finetune.align import IGNORE_INDEX, align_labels, encode_tagged, first_piece_positions
from tests.helpers.finetune_data import minilm_folder

LABEL2ID = {"O": 0, "B-T": 1, "I-T": 2}
WORDS = ["Unbelievably", ",", "the", "meeting", "lasted", "until", "Friday", "1998", "."]
TAGS = ["O", "O", "O", "O", "O", "O", "B-T", "I-T", "O"]


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def wordpiece():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(minilm_folder())


def tiny_byte_level_bpe(add_prefix_space: bool):
    """A RoBERTa-style byte-level BPE trained here on a few sentences (no download)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import RobertaTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<s>", "</s>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    corpus = ["The meeting lasted until Friday .", "Sales rose sharply in 1998 after the talks ."] * 20
    backend.train_from_iterator(corpus, trainer)
    backend.post_processor = processors.RobertaProcessing(
        ("</s>", backend.token_to_id("</s>")), ("<s>", backend.token_to_id("<s>")), add_prefix_space=True
    )
    return RobertaTokenizerFast(
        tokenizer_object=backend,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        add_prefix_space=add_prefix_space,
    )


def check_alignment(tokenizer, words=WORDS, tags=TAGS):
    """Every piece carries its word's label; special tokens -100; first pieces point at words."""
    [sentence] = encode_tagged(tokenizer, [words], [tags], LABEL2ID, max_length=64)
    encoding = tokenizer(words, is_split_into_words=True)
    word_ids = encoding.word_ids()
    labels = sentence.features["labels"]
    assert len(labels) == len(sentence.features["input_ids"]) == len(word_ids)
    for word_id, label in zip(word_ids, labels):
        assert label == (IGNORE_INDEX if word_id is None else LABEL2ID[tags[word_id]])
    assert labels[0] == IGNORE_INDEX  # CLS / <s> / BOS
    assert len(sentence.first_pieces) == len(words) and sentence.tags == tags
    assert [word_ids[p] for p in sentence.first_pieces] == list(range(len(words)))
    assert sum(1 for w in word_ids if w is not None) > len(words)  # some word really was split
    return encoding.tokens(), word_ids


def test_align_labels_and_first_pieces():
    word_ids = [None, 0, 0, 1, 2, 2, 2, None, None]
    assert align_labels(word_ids, [0, 1, 2]) == [-100, 0, 0, 1, 2, 2, 2, -100, -100]
    assert first_piece_positions(word_ids) == [1, 3, 4]
    assert first_piece_positions([None, 0, 2, None]) == [1, -1, 2]  # word 1 had no piece
    assert first_piece_positions([None, None]) == []


def test_wordpiece_needs_no_prefix_space(wordpiece):
    tokens, word_ids = check_alignment(wordpiece)
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]"
    assert any(t.startswith("##") for t in tokens)
    assert not any(t.startswith("Ġ") for t in tokens)


def test_byte_level_bpe_requires_a_prefix_space():
    with pytest.raises(AssertionError, match="add_prefix_space=True"):  # transformers asserts it
        tiny_byte_level_bpe(add_prefix_space=False)(WORDS, is_split_into_words=True)
    tokenizer = tiny_byte_level_bpe(add_prefix_space=True)
    tokens, word_ids = check_alignment(tokenizer)
    first = {}
    for token, word_id in zip(tokens, word_ids):
        first.setdefault(word_id, token)
    assert all(first[i].startswith("Ġ") for i in range(len(WORDS)))  # each word encoded as mid-sentence


def test_enable_prefix_space_fixes_a_plain_byte_level_tokenizer():
    from transformers import PreTrainedTokenizerFast

    from src.finetune.models import enable_prefix_space

    plain = PreTrainedTokenizerFast(tokenizer_object=tiny_byte_level_bpe(True).backend_tokenizer)
    plain.backend_tokenizer.pre_tokenizer = __import__("tokenizers").pre_tokenizers.ByteLevel(add_prefix_space=False)
    assert not plain(["meeting"], is_split_into_words=True).tokens()[1].startswith("Ġ")
    enable_prefix_space(plain)
    assert plain(["meeting"], is_split_into_words=True).tokens()[1].startswith("Ġ")


def test_padding_and_truncation(wordpiece):
    from transformers import DataCollatorForTokenClassification

    long_words = ["word"] * 30
    encoded = encode_tagged(
        wordpiece, [["Friday", "."], long_words], [["B-T", "O"], ["O"] * 30], LABEL2ID, max_length=12
    )
    assert len(encoded[1].features["input_ids"]) == 12
    assert len(encoded[1].first_pieces) == 10 and len(encoded[1].tags) == 10  # words cut by truncation dropped
    batch = DataCollatorForTokenClassification(wordpiece)([e.features for e in encoded])
    labels = batch["labels"]
    padded = batch["attention_mask"] == 0
    assert bool((labels[padded] == IGNORE_INDEX).all()) and bool(padded.any())


def test_bad_tags_are_named(wordpiece):
    with pytest.raises(ValueError, match="sentence 0: tag 'B-E'"):
        encode_tagged(wordpiece, [["a"]], [["B-E"]], LABEL2ID, 8)
    with pytest.raises(ValueError, match="2 words but 1 tags"):
        encode_tagged(wordpiece, [["a", "b"]], [["O"]], LABEL2ID, 8)


@pytest.mark.slow
def test_smollm2_gguf_tokenizer_gets_a_prefix_space():
    """The offline decoder's tokenizer is GPT-2-style byte-level BPE read from the GGUF file."""
    from src.finetune.models import get_spec, load_tokenizer

    try:
        tokenizer = load_tokenizer(get_spec("smollm2"))
    except ModuleNotFoundError as exc:
        pytest.skip(str(exc))
    assert tokenizer.pad_token == tokenizer.eos_token and tokenizer.padding_side == "right"
    tokens, word_ids = check_alignment(tokenizer)
    first = {}
    for token, word_id in zip(tokens, word_ids):
        if word_id is not None:
            first.setdefault(word_id, token)
    assert all(first[i].startswith("Ġ") for i in range(len(WORDS)))
