"""The README's results block is generated from the analysis outputs (``scripts/results_table.py``)."""

from __future__ import annotations

import csv
import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SPEC = importlib.util.spec_from_file_location("results_table", ROOT / "scripts" / "results_table.py")
results_table = importlib.util.module_from_spec(SPEC)
sys.modules[SPEC.name] = results_table  # dataclasses look their module up by name
SPEC.loader.exec_module(results_table)

CONFIGS = [
    # configuration, model, strategy, kind
    ("solo-I", "solo", "I", "prompted"),
    ("solo-A+D", "solo", "A+D", "prompted"),
    ("tagger-finetuned", "tagger", "finetuned", "finetuned"),
]
# key -> configuration -> (f1, n); comp/base has no prompted score for A+D
SCORES = {
    "timex/base": {"solo-I": (0.31749, 40.0), "solo-A+D": (0.1, 40.0), "tagger-finetuned": (0.8871, 400.0)},
    "timex/len": {"solo-I": (0.0156, 40.0), "solo-A+D": (0.0, 40.0), "tagger-finetuned": (0.871, 77.0)},
    "comp/base": {"solo-I": (0.136, 40.0), "tagger-finetuned": (0.5, 400.0)},
}


def write_outputs(reports: Path, keys=("timex/base", "timex/len", "comp/base")) -> None:
    """The files ``python -m src.analyze`` writes that the script reads, in their real format."""
    tables = reports / "tables"
    tables.mkdir(parents=True)
    (reports / "analysis.json").write_text(
        json.dumps({"datasets": list(keys), "seed": 13, "resamples": 1000, "experiment": "tempgen"})
    )
    with (tables / "configurations.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["configuration", "model", "strategy", "kind", "family", "seed", "git_commit", "run_id"])
        for name, model, strategy, kind in CONFIGS:
            writer.writerow([name, model, strategy, kind, "f", 13, "c0ffee", "r"])
    for key, cells in SCORES.items():
        task, dataset = key.split("/")
        with (tables / f"dataset_{task}_{dataset}.csv").open("w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["configuration", "f1", "f1_ci_low", "f1_ci_high", "precision", "n"])
            for config, (f1, n) in cells.items():
                writer.writerow([config, f1, f1 - 0.05, f1 + 0.05, f1, n])
    with (tables / "finetuned.csv").open("w", newline="") as handle:
        csv.writer(handle).writerow(["configuration", *SCORES])


EXPECTED = [
    "Profile `default`; `solo` (prompted): 40 instances per set; `tagger` (fine-tuned): 77-400 instances per set;"
    " seed 13, 1000 bootstrap resamples. LCS F1 (the primary metric) per task/dataset.",
    "",
    "| task/dataset | I | A+D | tagger (fine-tuned) |",
    "|---|---|---|---|",
    "| timex/base | 0.317 | 0.100 | 0.887 |",
    "| timex/len | 0.016 | 0.000 | 0.871 |",
    "| comp/base | 0.136 | – | 0.500 |",
]


def test_render_gives_one_row_per_dataset_and_one_column_per_configuration(tmp_path):
    write_outputs(tmp_path)
    analysis = json.loads((tmp_path / "analysis.json").read_text())
    block = results_table.render(analysis, tmp_path / "tables", "default")
    assert block.splitlines() == EXPECTED


def test_sets_only_the_finetuned_models_were_scored_on_follow_the_analysis_order(tmp_path):
    write_outputs(tmp_path, keys=("timex/base", "timex/len"))
    analysis = json.loads((tmp_path / "analysis.json").read_text())
    assert results_table.dataset_keys(analysis, tmp_path / "tables") == ["timex/base", "timex/len", "comp/base"]


def test_two_prompted_models_are_named_by_configuration(tmp_path):
    write_outputs(tmp_path)
    configs = results_table.read_configurations(tmp_path / "tables")
    other = results_table.Configuration("duo-I", "duo", "I", "prompted")
    titles = [results_table.column_title(c, single_prompted_model=False) for c in [*configs, other]]
    assert titles == ["solo-I", "solo-A+D", "tagger (fine-tuned)", "duo-I"]


def make_readme(path: Path, block: str) -> None:
    path.write_text(f"# title\n\nbefore\n\n{results_table.START}\n{block}{results_table.END}\n\nafter\n")


def test_write_replaces_only_the_block_and_check_then_passes(tmp_path):
    write_outputs(tmp_path / "reports")
    readme = tmp_path / "README.md"
    make_readme(readme, "stale numbers\n")
    args = ["--reports", str(tmp_path / "reports"), "--readme", str(readme), "--profile", "default"]
    assert results_table.main([*args, "--check"]) == 1
    assert "stale numbers" in readme.read_text()
    assert results_table.main(args) == 0
    text = readme.read_text()
    expected_block = "\n".join(EXPECTED) + "\n"
    assert text == f"# title\n\nbefore\n\n{results_table.START}\n{expected_block}{results_table.END}\n\nafter\n"
    assert results_table.main([*args, "--check"]) == 0


def test_check_fails_on_one_changed_number(tmp_path, capsys):
    write_outputs(tmp_path / "reports")
    readme = tmp_path / "README.md"
    make_readme(readme, "\n".join(EXPECTED).replace("0.887", "0.888") + "\n")
    code = results_table.main(
        ["--reports", str(tmp_path / "reports"), "--readme", str(readme), "--profile", "default", "--check"]
    )
    assert code == 1
    assert "results block differs" in capsys.readouterr().err


def test_profile_is_read_from_the_sweep_file(tmp_path):
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text("sweep:\n  profile: smoke\n  limit: 2\n")
    assert results_table.read_profile(sweep) == "smoke"
    assert results_table.read_profile(tmp_path / "missing.yaml") is None


def test_a_readme_without_markers_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="results:start"):
        results_table.replace_block("# no block\n", "x\n")


def test_the_project_readme_has_one_results_block_of_at_most_25_lines():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert text.count(results_table.START) == 1 and text.count(results_table.END) == 1
    block = text.split(results_table.START, 1)[1].split(results_table.END, 1)[0]
    assert 3 <= len(block.strip().splitlines()) <= 25
