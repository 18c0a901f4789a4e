"""`toolrouter up --help` names the settings a first run most often changes, with their
defaults: they must be the settings' own."""

from __future__ import annotations

import re

from click.testing import CliRunner

from router.cli.main import main
from router.settings import Settings


def test_the_defaults_up_help_names_are_the_settings_defaults() -> None:
    shown = " ".join(CliRunner().invoke(main, ["up", "--help"]).output.split())
    named = re.findall(r"TOOLROUTER_([A-Z_]+) \(([^)]+)\)", shown)
    assert len(named) == 4, shown
    for name, default in named:
        assert str(Settings.model_fields[name.lower()].default) == default, name
