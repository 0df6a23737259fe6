"""What a configuration will send and cost, checked against a budget before the first request.

One place for the money: the price of a model (its file's ``price`` block, per million tokens),
prompt-token counts (the model's tokenizer where it is on this machine, else a stated estimate),
the plan of one configuration (requests, identical prompts, cache hits, what is left to send,
the output-token ceiling and its price), the ``budget.*`` check a run makes before it opens an
MLflow run, and the spend ledger a sweep's runs share (``budget.ledger``).

The plan is built from the run's own requests and its own cache lookup, so its ``to_send`` is
exactly what the run sends; nothing here starts a backend or sends a request.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from src.backends.base import ChatRequest, GenerationResult
from src.backends.cache import cache_key
from src.run_checks import ConfigError

ESTIMATE = "estimate (characters / 4)"
TOKENIZER = "tokenizer"
MIXED = "tokenizer and estimate"
CHARS_PER_TOKEN = 4
LEDGER_FORMAT = 1


@dataclass(frozen=True)
class Price:
    """USD per million tokens, and when and where the figure was read."""

    input_per_mtok: float
    output_per_mtok: float
    read: str | None = None
    source: str | None = None

    def cost(self, prompt_tokens: float, completion_tokens: float) -> float:
        return (prompt_tokens * self.input_per_mtok + completion_tokens * self.output_per_mtok) / 1e6


def model_price(cfg: DictConfig) -> Price | None:
    """The model file's ``price`` block; a local model without one is free; an API model without
    one has no known price (None)."""
    block = cfg.model.get("price")
    if block is None:
        return None if str(cfg.model.backend) == "openai" else Price(0.0, 0.0, None, "local model")
    values = OmegaConf.to_container(block, resolve=True)
    numbers = {}
    for key in ("input_per_mtok", "output_per_mtok"):
        value = values.get(key) if isinstance(values, dict) else None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise ConfigError(f"model.price.{key}: expected a number >= 0 (USD per million tokens), got {value!r}")
        numbers[key] = float(value)
    read, source = values.get("read"), values.get("source")
    return Price(**numbers, read=None if read is None else str(read), source=None if source is None else str(source))


class TokenCounter:
    """Prompt tokens of a request: exact where a tokenizer is at hand, else characters / 4."""

    def __init__(self, tokenize_completion=None, tokenize_chat=None, name: str = "") -> None:
        self._completion = tokenize_completion
        self._chat = tokenize_chat
        self.name = name

    def count(self, request: ChatRequest) -> tuple[int, bool]:
        """(tokens, exact)."""
        tokenize = self._completion if request.completion else self._chat
        if tokenize is not None:
            return tokenize(request), True
        return math.ceil(sum(len(content) for _, content in request.messages) / CHARS_PER_TOKEN), False


@contextlib.contextmanager
def _quiet_native_stderr() -> Iterator[None]:
    """llama.cpp writes context notes to file descriptor 2 even when told not to."""
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def token_counter(cfg: DictConfig) -> TokenCounter:
    """The model's tokenizer where it is cheap and local: the GGUF's vocabulary for a llama.cpp model
    (completion prompts, which are the text as sent; chat prompts add a template and are estimated),
    ``model.tokenizer`` (a Hugging Face id already downloaded) for any model; else the estimate."""
    options = OmegaConf.to_container(cfg.model.get("options") or {}, resolve=True)
    hf_name = cfg.model.get("tokenizer")
    if hf_name:
        try:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(str(hf_name), local_files_only=True)
        except Exception:  # noqa: BLE001 - not on this machine: the stated estimate
            return TokenCounter()

        def chat(request: ChatRequest) -> int:
            return len(tokenizer.apply_chat_template(request.message_dicts(), add_generation_prompt=True))

        def plain(request: ChatRequest) -> int:
            return len(tokenizer.encode(request.messages[0][1]))

        return TokenCounter(plain, chat, str(hf_name))
    if str(cfg.model.backend) == "llamacpp":
        try:
            import llama_cpp

            from src.backends.gguf_files import gguf_path

            path = gguf_path(str(cfg.model.model_id), options.get("gguf_file"), options.get("gguf_package"))
            with _quiet_native_stderr():
                vocab = llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)
        except Exception:  # noqa: BLE001 - no llama.cpp or no file: the stated estimate
            return TokenCounter()
        add_bos = bool(vocab._model.add_bos_token())

        def completion(request: ChatRequest) -> int:
            return len(vocab.tokenize(request.messages[0][1].encode("utf-8"), add_bos=add_bos, special=False))

        return TokenCounter(completion, None, Path(path).name)
    return TokenCounter()


def request_key(backend: Any, request: ChatRequest) -> str | None:
    """The response-cache key of a deterministic request (identical prompts share it); None for
    a sampled one, which is sent every time."""
    return cache_key(backend.key_fields(request)) if request.deterministic else None


def plan_configuration(
    name: str,
    backend: Any,
    batches: Sequence[tuple[str, Sequence[ChatRequest]]],
    price: Price | None,
    counter: TokenCounter,
    seen: set[str] | None = None,
) -> dict[str, Any]:
    """What running ``batches`` ((task/dataset, requests), in the run's order) through the cached
    ``backend`` sends: identical prompts once, cache hits (the lookup the run makes) not at all.
    ``seen`` (request keys planned by earlier configurations of the same sweep, updated here):
    their answers will be cached by the time this configuration runs, so they count as duplicates
    (e.g. every model of a sweep sent to one self-hosted model under the same id).

    Costs are ceilings: prompt tokens as counted plus every answer at its ``max_tokens``; retried
    attempts are not in them (a failed attempt is usually not billed, a retried success is).
    """
    seen = set() if seen is None else seen
    datasets: dict[str, dict[str, Any]] = {}
    exact = estimated = 0
    for label, requests in batches:
        row = {"requests": len(requests), "duplicates": 0, "cached": 0, "to_send": 0, "prompt_tokens": 0}
        row["output_token_ceiling"] = 0
        for request in requests:
            key = request_key(backend, request)
            if key is not None:
                if key in seen:
                    row["duplicates"] += 1
                    continue
                seen.add(key)
                if backend.cache.get(key, backend.key_fields(request)) is not None:
                    row["cached"] += 1
                    continue
            tokens, is_exact = counter.count(request)
            exact, estimated = exact + is_exact, estimated + (not is_exact)
            row["to_send"] += 1
            row["prompt_tokens"] += tokens
            row["output_token_ceiling"] += request.max_tokens
        datasets[label] = row
    totals = {key: sum(row[key] for row in datasets.values()) for key in next(iter(datasets.values()), {})}
    method = TOKENIZER if exact and not estimated else ESTIMATE if estimated and not exact else MIXED
    if not exact and not estimated:
        method = "none to send"
    plan: dict[str, Any] = {
        "configuration": name,
        **totals,
        "prompt_tokens_counted_by": method if method != TOKENIZER else f"{TOKENIZER} ({counter.name})",
        "price": None if price is None else asdict(price),
        "datasets": datasets,
    }
    plan.update(plan_costs(price, totals.get("prompt_tokens", 0), totals.get("output_token_ceiling", 0)))
    return plan


def plan_costs(price: Price | None, prompt_tokens: float, output_tokens: float) -> dict[str, float | None]:
    """Prompt cost, output-ceiling cost and their sum in USD; None for each when the price is unknown."""
    if price is None:
        return {"prompt_cost_usd": None, "output_ceiling_cost_usd": None, "ceiling_cost_usd": None}
    prompt, output = price.cost(prompt_tokens, 0), price.cost(0, output_tokens)
    return {"prompt_cost_usd": prompt, "output_ceiling_cost_usd": output, "ceiling_cost_usd": prompt + output}


def usd(value: float) -> str:
    """Dollars readable at any scale: cents from $1 up, else up to six decimals (``$0.00013``)."""
    if abs(value) >= 1:
        return f"${value:,.2f}"
    short = f"{value:.6f}".rstrip("0").rstrip(".")
    return f"${short}" if short not in ("0", "-0") or value == 0 else f"${value:.3g}"


def result_cost(result: GenerationResult, price: Price | None) -> float:
    """The provider's reported ``usage.cost`` where it sent one, else the tokens at the list price."""
    usage = result.usage or {}
    if usage.get("cost") is not None:
        return float(usage["cost"])
    if price is None:
        return 0.0
    return price.cost(float(usage.get("prompt_tokens") or 0), float(usage.get("completion_tokens") or 0))


def attempts_of(result: GenerationResult) -> int:
    """Attempts the backend made for a sent request (1 where the backend does not say)."""
    return int(getattr(result, "attempts", 1) or 1)


# ----- budget and ledger ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Budget:
    """``budget.*``: caps on new cost and new requests (None: no cap), and the ledger a sweep shares."""

    max_cost_usd: float | None = None
    max_requests: int | None = None
    ledger: str | None = None
    ledger_file: Path = Path(".cache/spend.json")


DVC_NULLABLE = ("max_cost_usd", "max_requests", "ledger")


def sweep_budget(path: Path) -> dict[str, Any]:
    """The caps of a sweep profile (``sweep.max_cost_usd``, ``sweep.max_requests``) with the
    profile's name as the ledger: what the pipeline's ``run@`` stages are held to. Read at run
    time, not passed as stage params, so changing a cap never re-runs a finished stage."""
    import yaml

    try:
        sweep = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("sweep") or {}
    except (OSError, yaml.YAMLError) as error:
        raise ConfigError(f"budget.sweep_file: cannot read {path} ({error})") from None
    return {
        "max_cost_usd": sweep.get("max_cost_usd"),
        "max_requests": sweep.get("max_requests"),
        "ledger": str(sweep["profile"]) if sweep.get("profile") else None,
    }


def budget_from_config(cfg: DictConfig) -> Budget:
    block = dict(cfg.get("budget") or {})
    if block.get("sweep_file"):
        block.update(sweep_budget(Path(str(block["sweep_file"]))))
    # DVC writes a null sweep value into a stage command as None: the same as null here
    cost, requests, ledger = (None if block.get(k) == "None" else block.get(k) for k in DVC_NULLABLE)
    if cost is not None and (
        isinstance(cost, bool) or not isinstance(cost, (int, float)) or not math.isfinite(cost) or cost < 0
    ):
        raise ConfigError(f"budget.max_cost_usd: expected a number of USD >= 0 or null, got {cost!r}")
    if requests is not None and (isinstance(requests, bool) or not isinstance(requests, int) or requests < 0):
        raise ConfigError(f"budget.max_requests: expected an integer >= 0 or null, got {requests!r}")
    if ledger is not None and (not isinstance(ledger, str) or not ledger.strip()):
        raise ConfigError(f"budget.ledger: expected a name or null, got {ledger!r}")
    path = Path(str(block.get("ledger_file") or ".cache/spend.json"))
    return Budget(None if cost is None else float(cost), requests, ledger, path)


def read_ledger(path: Path) -> dict[str, Any]:
    """The ledger file's content ({} when absent); a file that is not a ledger is a ConfigError."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {"format": LEDGER_FORMAT, "ledgers": {}}
    except (OSError, ValueError) as error:
        raise ConfigError(f"budget.ledger_file: {path} is not a spend ledger ({error}); move it away") from None
    if not isinstance(data, dict) or not isinstance(data.get("ledgers"), dict):
        raise ConfigError(f"budget.ledger_file: {path} is not a spend ledger (no 'ledgers' object); move it away")
    return data


def spent(budget: Budget) -> dict[str, float]:
    """What earlier runs of ``budget.ledger`` sent and spent (zero without a ledger)."""
    if budget.ledger is None:
        return {"cost_usd": 0.0, "requests": 0, "runs": 0}
    entries = read_ledger(budget.ledger_file)["ledgers"].get(budget.ledger, [])
    return {
        "cost_usd": float(sum(e.get("cost_usd", 0.0) for e in entries)),
        "requests": int(sum(e.get("requests", 0) for e in entries)),
        "runs": len(entries),
    }


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock beside the ledger, so concurrent runs of a sweep do not lose an entry."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def record_spend(budget: Budget, run_name: str, spend: dict[str, float]) -> None:
    """Append one run's new cost, requests and attempts to its ledger (atomically, under a lock)."""
    if budget.ledger is None:
        return
    path = budget.ledger_file
    with _locked(path):
        data = read_ledger(path)
        data["ledgers"].setdefault(budget.ledger, []).append(
            {"run": run_name, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **spend}
        )
        temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        temp.write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
        os.replace(temp, path)


def budget_problem(budget: Budget, plan: dict[str, Any], already: dict[str, float]) -> str | None:
    """Why the plan does not fit the budget (one line without ``error:``), else None."""
    to_send = int(plan.get("to_send", 0))
    ceiling = plan.get("ceiling_cost_usd")
    where = f" (ledger {budget.ledger!r}: {already['runs']} runs)" if budget.ledger else ""
    if budget.max_requests is not None and already["requests"] + to_send > budget.max_requests:
        left = max(0, budget.max_requests - int(already["requests"]))
        return (
            f"budget: {plan['configuration']} would send {to_send} requests; {int(already['requests'])} sent so far"
            f"{where}, {left} remain of budget.max_requests={budget.max_requests}"
        )
    if budget.max_cost_usd is None or to_send == 0:
        return None
    if ceiling is None:
        return (
            f"budget: {plan['configuration']} would send {to_send} requests to a model without a price "
            "(add a price block to its model file) and budget.max_cost_usd is set"
        )
    if already["cost_usd"] + ceiling > budget.max_cost_usd:
        left = max(0.0, budget.max_cost_usd - already["cost_usd"])
        return (
            f"budget: {plan['configuration']} would cost {usd(ceiling)} ({to_send} requests) at most; "
            f"{usd(already['cost_usd'])} spent so far{where}, {usd(left)} remain of "
            f"budget.max_cost_usd={budget.max_cost_usd:g}"
        )
    return None
