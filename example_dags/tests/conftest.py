"""Setup for the example DAGs' tests: a throwaway Airflow home, and the model's connection.

Replay builds the model from its connection but never calls it, so a placeholder key does; with
``pytest --durable-record`` set ``AIRFLOW_CONN_SUPPORT_LLM`` to the real connection first.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

if "airflow" not in sys.modules:  # Airflow reads its home once, when it is first imported
    os.environ["AIRFLOW_HOME"] = tempfile.mkdtemp(prefix="airflow-home-")
    os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
    os.environ["AIRFLOW__CORE__UNIT_TEST_MODE"] = "True"

os.environ.setdefault(
    "AIRFLOW_CONN_SUPPORT_LLM",
    json.dumps(
        {
            "conn_type": "pydantic_ai",
            "host": "https://api.openai.com/v1",
            "password": "replay-needs-no-key",
            "extra": {"model": "openai-chat:gpt-4o-mini"},
        }
    ),
)
