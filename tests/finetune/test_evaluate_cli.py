"""The fine-tuned evaluation command refuses bad options in one line (it used to trace back)."""

from __future__ import annotations

import pytest

from src.finetune import evaluate


@pytest.mark.parametrize(
    "options, message",
    [
        (["--resamples", "0"], "argument --resamples: expected an integer from 1 to 1,000,000, got '0'"),
        (["--batch-size", "-3"], "argument --batch-size: expected an integer from 1 to 4,096, got '-3'"),
        (["--seed", "x"], "argument --seed: expected an integer from 0 to 4,294,967,295, got 'x'"),
    ],
)
def test_bad_options_are_one_line_and_exit_2(options, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        evaluate.main(["--model", "minilm", *options])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and "Traceback" not in err
