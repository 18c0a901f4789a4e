"""`--args` past a float's range (`1e400`) or a JSON constant JSON does not have (`NaN`) is
refused on the command line, by name: it went out as `Infinity`, and the API's refusal
blamed a word the user never wrote."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from router.cli.main import main


@pytest.mark.parametrize(
    ("args", "said"),
    [
        ('{"amount": 1e400}', "1e400 is out of a JSON number's range"),
        ('{"amount": -1e400}', "-1e400 is out of a JSON number's range"),
        ('{"amount": NaN}', "NaN is not valid JSON"),
    ],
)
@pytest.mark.parametrize("command", [["call", "add"], ["approvals", "approve", "req-x"]])
def test_args_json_cannot_carry_is_refused_by_name(
    command: list[str], args: str, said: str
) -> None:
    result = CliRunner().invoke(main, [*command, "--args", args, "--key", "trk_x"])
    assert result.exit_code == 2, result.output
    assert said in result.output
