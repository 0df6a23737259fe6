"""A hand run of a derive module with no setting flags builds what its DVC stage builds: every
setting resolves to the stage's own block of params.yaml (and sweep.derive_limit)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from src.backends.options import OpenAIOptions
from src.derive import adv, adv_p, voc
from src.derive.settings import stage_settings

ROOT = Path(__file__).resolve().parents[2]
PARAMS = yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8"))
SWEEP = yaml.safe_load((ROOT / "sweep.yaml").read_text(encoding="utf-8"))["sweep"]
PATHS = ["--input", "base.jsonl", "--output", "out.jsonl"]
#: Each stage's module and the arguments its dvc.yaml command passes besides the paths.
STAGES = {
    "adv": (adv, ["--task", "eventx"]),
    "adv_p": (adv_p, ["--cache-dir", ".cache/generations"]),
    "voc": (voc, ["--train", "train.jsonl"]),
}


def _expected(stage: str) -> dict:
    shared = {"victim": PARAMS["derive"]["victim"]} if stage == "adv" else {}
    profile = {"generator": SWEEP["adv_p_generator"]} if stage == "adv_p" else {}
    return {"seed": PARAMS["seed"], "limit": SWEEP["derive_limit"], **shared, **PARAMS["derive"][stage], **profile}


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_a_run_without_setting_flags_uses_exactly_the_params_block(stage: str):
    module, extra = STAGES[stage]
    args = vars(module.parse_args(PATHS + extra))
    expected = _expected(stage)
    assert {key: args[key] for key in expected} == expected
    # the values keep their YAML types (a bool stays a bool, 0.8 a float), as the stats record them
    assert {key: type(args[key]) for key in expected} == {key: type(value) for key, value in expected.items()}
    assert stage_settings(stage) == expected


def test_the_adv_victim_checkpoint_follows_derive_victim():
    args = adv.parse_args(PATHS + ["--task", "timex"])
    assert args.checkpoint == f"models/finetuned/{PARAMS['derive']['victim']}-timex"
    assert adv.parse_args(PATHS + ["--task", "timex", "--checkpoint", "ckpt"]).checkpoint == "ckpt"


def test_the_adv_p_generator_is_the_profiles_model_file():
    """The default profile rewrites offline with the embedded model; the generator is no params.yaml key."""
    assert "generator" not in PARAMS["derive"]["adv_p"]
    args = adv_p.parse_args(PATHS + ["--cache-dir", "c"])
    path = adv_p.model_config_path(args)
    assert path == ROOT / "conf" / "model" / f"{SWEEP['adv_p_generator']}.yaml" and path.is_file()
    backend, model_id, _ = adv_p.generator_settings(args)
    generator = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert (backend, model_id) == (generator["backend"], generator["model_id"])
    if SWEEP["profile"] == "default":
        assert (backend, model_id) == ("llamacpp", "smollm2-135m-gguf")


def test_the_paper_profile_rewrites_with_gpt41_through_the_openai_backend():
    """The study's rewriter: GPT-4.1 on OpenRouter, its options composed as src.run composes them."""
    paper = str(ROOT / "conf" / "profiles" / "paper.yaml")
    args = adv_p.parse_args(PATHS + ["--cache-dir", "c", "--sweep", paper])
    assert args.generator == "gpt41" and args.limit is None
    backend, model_id, options = adv_p.generator_settings(args)
    defaults = OpenAIOptions().as_dict()  # the options' one definition, composed as src.run composes it
    assert (backend, model_id) == ("openai", "openai/gpt-4.1")
    pinned = {"only": ["openai"], "allow_fallbacks": False, "require_parameters": True}  # OpenAI's own weights
    assert options == {
        **defaults,
        "base_url": "https://openrouter.ai/api/v1",
        "api_key_env": "OPENROUTER_API_KEY",
        "routing": pinned,
        "on_model_mismatch": "fail",  # pinned means pinned: an off-pin rewrite is never kept
    }
    price = yaml.safe_load((ROOT / "conf" / "model" / "gpt41.yaml").read_text(encoding="utf-8"))["price"]
    assert (price["input_per_mtok"], price["output_per_mtok"], price["read"]) == (2.0, 8.0, "2025-07")


def _sweep_with(tmp_path: Path, **changes) -> Path:
    values = {"sweep": {**SWEEP, **changes}}
    values["sweep"] = {k: v for k, v in values["sweep"].items() if v != "<drop>"}
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(values), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "change, message",
    [
        ({"adv_p_generator": "<drop>"}, ("sweep.adv_p_generator: field required",)),
        ({"adv_p_generator": "gpt5_typo"}, ("adv_p generator: no model file", "conf/model/gpt5_typo.yaml")),
    ],
)
def test_a_missing_or_unknown_generator_is_one_error_line(tmp_path, capsys, change, message):
    with pytest.raises(SystemExit) as stopped:
        adv_p.parse_args(PATHS + ["--cache-dir", "c", "--sweep", str(_sweep_with(tmp_path, **change))])
    err = capsys.readouterr().err.strip().splitlines()
    assert stopped.value.code == 2 and all(fragment in err[-1] for fragment in message), err


def test_the_generator_in_params_is_refused_not_shadowed(tmp_path, capsys):
    """One place chooses the generator: a params.yaml copy of it would silently lose to the profile."""
    with pytest.raises(SystemExit) as stopped:
        adv_p.parse_args(PATHS + ["--cache-dir", "c", "--params", str(_params_with(tmp_path, "adv_p", generator="x"))])
    assert stopped.value.code == 2
    assert "derive.adv_p.generator is chosen by the profile (sweep.adv_p_generator)" in capsys.readouterr().err


def test_flags_override_one_setting_each():
    args = adv.parse_args(PATHS + ["--task", "timex", "--chain", "false", "--minilm-neighbours", "0", "--seed", "3"])
    assert (args.chain, args.minilm_neighbours, args.seed) == (False, 0, 3)
    assert args.eventx_char is PARAMS["derive"]["adv"]["eventx_char"]  # the others still come from params
    assert voc.parse_args(PATHS + ["--train", "t", "--rare-max-count", "2"]).rare_max_count == 2


def test_limit_null_means_every_record_and_no_flag_means_the_sweep_limit():
    assert voc.parse_args(PATHS + ["--train", "t"]).limit == SWEEP["derive_limit"]
    assert voc.parse_args(PATHS + ["--train", "t", "--limit", "null"]).limit is None
    assert voc.parse_args(PATHS + ["--train", "t", "--limit", "0"]).limit == 0


def _params_with(tmp_path: Path, stage: str, **changes) -> Path:
    values = yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8"))
    values["derive"][stage].update(changes)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(values), encoding="utf-8")
    return path


def test_the_params_file_is_read_and_checked_like_the_command_line(tmp_path, capsys):
    params = _params_with(tmp_path, "adv", query_budget=7, chain=False)
    args = adv.parse_args(PATHS + ["--task", "timex", "--params", str(params)])
    assert (args.query_budget, args.chain) == (7, False)
    bad = _params_with(tmp_path, "adv", success_criterion="most_spans")
    with pytest.raises(SystemExit) as stopped:
        adv.parse_args(PATHS + ["--task", "timex", "--params", str(bad)])
    assert stopped.value.code == 2 and "most_spans" in capsys.readouterr().err
    unknown = _params_with(tmp_path, "voc", rare_max_cnt=1)
    with pytest.raises(SystemExit):
        voc.parse_args(PATHS + ["--train", "t", "--params", str(unknown)])
    assert "rare_max_cnt is no setting" in capsys.readouterr().err


@pytest.mark.parametrize("workers", ["0", "-1"])
def test_adv_workers_below_one_is_an_error_not_one_per_cpu(workers: str, capsys):
    """Regression: ``--workers 0`` used to mean one worker per CPU (a truthiness check)."""
    with pytest.raises(SystemExit) as stopped:
        adv.parse_args(PATHS + ["--task", "timex", "--workers", workers])
    assert stopped.value.code == 2
    assert "--workers" in capsys.readouterr().err


def test_adv_workers_default_and_explicit():
    assert adv.parse_args(PATHS + ["--task", "timex"]).workers is None  # main: one per CPU
    assert adv.parse_args(PATHS + ["--task", "timex", "--workers", "1"]).workers == 1
