"""One settings layer: src/core/settings.py is the only reader of the settings files, its models
match params.yaml and every sweep profile key for key, and a bad file is one line naming file and
key. The oracle is PyYAML itself reading the committed files, not the models."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml

from src.analyze import check_settings, parse_args
from src.core import settings
from src.core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
#: The modules that may parse YAML, and why: the loader, and two that parse what is no settings file.
PARSERS = {
    "src/core/settings.py": "the loader",
    "src/config/hydra_outputs.py": "Hydra's own output copies (.hydra/*.yaml), redacted in place",
    "src/derive/adv_p.py": "one --set KEY=VALUE value, typed as YAML types it",
}
PROFILES = [ROOT / "sweep.yaml", *sorted((ROOT / "conf" / "profiles").glob("*.yaml"))]


def _yaml_parsers(path: Path) -> list[int]:
    """Lines of ``path`` that call a YAML or OmegaConf file parser."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            name = owner.id if isinstance(owner, ast.Name) else ""
            if (name == "yaml" and node.func.attr.startswith(("safe_load", "load", "full_load", "unsafe_load"))) or (
                name == "OmegaConf" and node.func.attr == "load"
            ):
                lines.append(node.lineno)
    return lines


def test_no_module_outside_the_loader_parses_a_settings_file():
    found = {}
    for path in sorted(SRC.rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if relative not in PARSERS and _yaml_parsers(path):
            found[relative] = _yaml_parsers(path)
    assert found == {}, f"parse settings through src.core.settings: {found}"
    # the allowed ones still parse (else the allowance is stale)
    assert all(_yaml_parsers(ROOT / relative) for relative in PARSERS)


def test_no_module_outside_the_loader_names_the_settings_files_it_would_read():
    pattern = re.compile(r"project_file\(\s*[\"'](params|sweep|dvc)\.yaml")
    offenders = [
        path.relative_to(ROOT).as_posix()
        for path in SRC.rglob("*.py")
        if path.name != "settings.py" and pattern.search(path.read_text(encoding="utf-8"))
    ]
    assert offenders == []


def _fields(model) -> set[str]:
    return set(model.model_fields)


def test_the_params_model_declares_exactly_the_keys_of_params_yaml():
    tree = yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8"))
    assert set(tree) == _fields(settings.Params)
    for block, model in (("analysis", settings.Analysis), ("paths", settings.Paths), ("study", settings.Study)):
        assert set(tree[block]) == _fields(model), block
    loaded = settings.load_params()
    assert loaded.analysis.model_dump() == tree["analysis"] and loaded.seed == tree["seed"]
    assert settings.params_tree() == tree


def test_params_yaml_is_the_one_home_of_the_analysis_defaults():
    """No field of the analysis model carries a default: params.yaml holds each value once, and the
    report's functions take them as arguments (tests/helpers/analysis_settings.py passes them)."""
    assert all(field.is_required() for field in settings.Analysis.model_fields.values())
    assert all(field.is_required() for field in settings.SweepProfile.model_fields.values())
    for relative in ("src/report/comparisons.py", "src/report/robustness.py", "src/report/uncertainty.py"):
        text = (ROOT / relative).read_text(encoding="utf-8")
        assert not re.search(r"^DEFAULT_(MARGIN|ALPHA|POWER|FLIP_THRESHOLD)\b", text, re.M), relative


def test_the_analysis_flags_default_to_params_yaml():
    tree = yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8"))["analysis"]
    args = parse_args([])
    assert (args.resamples, args.alpha, args.margin, args.unit) == (
        tree["resamples"],
        tree["alpha"],
        tree["margin"],
        tree["resample_unit"],
    )
    assert check_settings(args) is None
    args.resamples = 0
    assert check_settings(args) == "--resamples must be in [1, 1000000]"
    args.resamples, args.correction = 10, "bonferroni"
    assert check_settings(args) == "--correction must be one of holm, bh"


@pytest.mark.parametrize("profile", PROFILES, ids=lambda path: path.name)
def test_every_profile_states_every_key_the_model_declares(profile: Path):
    sweep = yaml.safe_load(profile.read_text(encoding="utf-8"))["sweep"]
    assert set(sweep) == _fields(settings.SweepProfile)
    assert settings.load_sweep(profile).model_dump() == sweep


@pytest.mark.parametrize(
    "change, message",
    [
        ({"limt": 3}, "sweep.limt: no such setting"),
        ({"limit": "ten"}, "sweep.limit: input should be a valid integer, got 'ten'"),
        ({"limit": 0}, "sweep.limit: input should be greater than or equal to 1, got 0"),
        ({"mode": "fast"}, "sweep.mode: input should be 'sync', 'batch' or 'flex', got 'fast'"),
        ({"max_cost_usd": True}, "sweep.max_cost_usd: input should be a valid number, got True"),
        ({"max_cost_usd": float("nan")}, "sweep.max_cost_usd: input should be a finite number, got nan"),
    ],
)
def test_a_bad_profile_is_one_line_naming_file_and_key(tmp_path: Path, change: dict, message: str):
    sweep = yaml.safe_load((ROOT / "sweep.yaml").read_text(encoding="utf-8"))["sweep"]
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({"sweep": {**sweep, **change}}), encoding="utf-8")
    with pytest.raises(ConfigError) as raised:
        settings.load_sweep(path)
    assert str(raised.value) == f"{path}: {message}"


def test_a_missing_key_an_unreadable_file_and_a_list_are_one_line(tmp_path: Path):
    sweep = yaml.safe_load((ROOT / "sweep.yaml").read_text(encoding="utf-8"))["sweep"]
    del sweep["resamples"]
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({"sweep": sweep}), encoding="utf-8")
    with pytest.raises(ConfigError, match=r"sweep.yaml: sweep.resamples: field required$"):
        settings.load_sweep(path)
    path.write_text("sweep: [unclosed\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"sweep.yaml: cannot read \(") as raised:
        settings.load_sweep(path)
    assert "\n" not in str(raised.value)
    path.write_text("- a\n- b\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"sweep.yaml: expected a mapping of settings, got list"):
        settings.load_sweep(path)
    with pytest.raises(ConfigError, match="missing.yaml: cannot read"):
        settings.load_sweep(tmp_path / "missing.yaml")


def test_a_bad_params_file_is_one_line_naming_the_key(tmp_path: Path):
    tree = yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8"))
    tree["analysis"]["alpha"] = 0.7
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(tree), encoding="utf-8")
    with pytest.raises(ConfigError) as raised:
        settings.load_params(path)
    assert str(raised.value) == f"{path}: analysis.alpha: input should be less than 0.5, got 0.7"
