"""The command line's actor is the operating-system user, named as :func:`getpass.getuser`
names it (the CLI reads the same login variables, in the same order, without importing
getpass on every run's start)."""

from __future__ import annotations

import getpass
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from phasegraph.cli._support import local_actor

VARIABLES = ("LOGNAME", "USER", "LNAME", "USERNAME")


@given(
    st.fixed_dictionaries({}, optional=dict.fromkeys(VARIABLES, st.sampled_from(["", "ann", "bo"])))
)
def test_the_actor_is_the_user_getpass_names(env: dict[str, str]) -> None:
    with pytest.MonkeyPatch.context() as patch:
        for name in VARIABLES:
            patch.delenv(name, raising=False)
        for name, value in env.items():
            patch.setenv(name, value)
        assert local_actor().name == f"local:{getpass.getuser()}"


def test_without_login_variables_the_passwd_entry_names_the_user(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pwd = pytest.importorskip("pwd")
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    assert local_actor().name == f"local:{pwd.getpwuid(os.getuid()).pw_name}"
