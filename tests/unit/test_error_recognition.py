"""Errors are recognised by their type, never by their message text or class name (issue 19).

What a storage error means (a wrong location, or a store that is down for a while) and which filesystem
schemes Airflow can open are decided by type and by Airflow's own registry, so a message reworded by a
library, or a class of the same name from elsewhere, changes nothing.
"""

from __future__ import annotations

import pytest
from botocore.exceptions import ParamValidationError

from airflow_pydantic_ai.durable import DurableConfigError
from airflow_pydantic_ai.durable.attempt.writer import is_configuration_error
from airflow_pydantic_ai.tries.settings import resolve_cache_path


def test_botocores_parameter_error_is_a_configuration_error_by_type():
    assert is_configuration_error(ParamValidationError(report="Invalid bucket name"))
    lookalike = type("ParamValidationError", (Exception,), {})  # same name, not botocore's
    assert not is_configuration_error(lookalike("Invalid bucket name"))
    assert not is_configuration_error(ConnectionError("store down"))
    assert is_configuration_error(PermissionError("denied"))


def test_a_scheme_no_airflow_provider_registers_is_named_as_unknown():
    with pytest.raises(DurableConfigError, match=r"'ftp://example\.com/cache' has an unknown scheme 'ftp'"):
        resolve_cache_path("ftp://example.com/cache")
