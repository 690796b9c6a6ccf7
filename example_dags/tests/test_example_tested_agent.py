"""The example agent DAG, replayed in CI from its recorded fixture: no API key, no model request, no tool call."""

from __future__ import annotations

from pathlib import Path

DAG_FILE = Path(__file__).parents[1] / "example_tested_agent.py"
FIXTURES = Path(__file__).parent / "fixtures" / "example_tested_agent"


# [START howto_testing_agent_test]
def test_triage_replays_from_its_fixture(durable_replay):
    result = durable_replay(DAG_FILE, task_id="triage", fixtures=FIXTURES)
    assert result.state == "success"
    assert result.xcom["priority"] == "high"


# [END howto_testing_agent_test]
