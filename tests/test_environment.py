"""zcache._engine.environment: every ZCACHE_* variable the library reads, in one table."""

from __future__ import annotations

import pathlib
import re

import pytest

from zcache._engine import environment
from zcache.exceptions import EnvironmentSettingError, ZCacheError

PACKAGE = pathlib.Path(environment.__file__).parents[1]


def test_every_zcache_variable_the_library_names_is_in_the_table():
    """A ZCACHE_* name anywhere in the package's code is one of SETTINGS, and the docstring's table lists each."""
    named = set()
    for path in PACKAGE.rglob("*.py"):
        named |= set(re.findall(r"\bZCACHE_[A-Z][A-Z0-9_]*\b", path.read_text()))
    named = {n for n in named if not n.startswith("ZCACHE_TEST_")}  # the tests' own (named in the docstring)
    assert named == set(environment.SETTINGS)
    table = environment.__doc__.split("=====", 1)[1]
    assert set(re.findall(r"``(ZCACHE_[A-Z_]+)``\s", table)) == set(environment.SETTINGS)


@pytest.mark.parametrize("value, expected", [("1", True), ("ON", True), (" yes ", True), ("true", True),
                                             ("0", False), ("Off", False), ("no", False), ("FALSE", False)])
def test_switch_values(value, expected):
    assert environment.switch("ZCACHE_TF_LOGS", {"ZCACHE_TF_LOGS": value}) is expected


def test_defaults_apply_where_unset_or_empty():
    assert environment.switch("ZCACHE_GC_FREEZE", {}) is True
    assert environment.switch("ZCACHE_GC_FREEZE", {"ZCACHE_GC_FREEZE": ""}) is True
    assert environment.switch("ZCACHE_TF_LOGS", {}) is False
    assert environment.switch("ZCACHE_COMPILE_CACHE", {}) is None  # empty default: the compile cache decides
    assert environment.setting("ZCACHE_CACHE_DIR", {"ZCACHE_CACHE_DIR": " /x "}) == "/x"


def test_bad_values_and_names_are_refused_with_what_to_do():
    with pytest.raises(EnvironmentSettingError, match=r"ZCACHE_GC_FREEZE='2' is not a switch value: set it to 1"):
        environment.switch("ZCACHE_GC_FREEZE", {"ZCACHE_GC_FREEZE": "2"})
    with pytest.raises(EnvironmentSettingError, match="not one of zcache's environment variables"):
        environment.setting("ZCACHE_TYPO", {})
    with pytest.raises(EnvironmentSettingError, match="a value, not a switch"):
        environment.switch("ZCACHE_CACHE_DIR", {})
    assert issubclass(EnvironmentSettingError, ZCacheError) and issubclass(EnvironmentSettingError, ValueError)
