"""Forgetting a failed answer leaves no gap on S3 either (the local moto server): a kill before the pack is
rewritten, and a zombie try packing what it loaded after the answer was forgotten; success deletes the
tombstones with everything else. The unit tier (``tests/unit/test_forgetting.py``) has the same cases on disk.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from pydantic_ai.exceptions import UnexpectedModelBehavior
from tests.helpers.durable import DurableHarness, RecordingLog, task_identity
from tests.helpers.forgetting import PROMPT, Killed, Script, answering_agent
from tests.helpers.s3 import S3Bucket, S3Server

from airflow_pydantic_ai.durable import StepStore, run_agent

pytestmark = pytest.mark.s3


@dataclass
class S3Harness(DurableHarness):
    """The tries of one task instance, on a bucket instead of a local folder."""

    fs: Any = None
    bucket: S3Bucket | None = None

    def store(self, log: RecordingLog | None = None) -> StepStore:
        assert self.bucket is not None
        return StepStore.for_task(
            self.fs,
            f"{self.bucket.name}/cache",
            f"s3://{self.bucket.name}/cache",
            self.identity,
            warn=(log or RecordingLog()).warning,
        )

    def object_names(self) -> list[str]:
        assert self.bucket is not None
        return [key.rsplit("/", 1)[-1] for key in self.bucket.list_keys("cache/")]


@pytest.fixture
def harness(s3_server: S3Server, s3_bucket: S3Bucket) -> S3Harness:
    fs, _ = s3_server.counting_filesystem()
    return S3Harness(base="", identity=task_identity("forget_dag", "summarise"), fs=fs, bucket=s3_bucket)


def test_a_kill_before_the_pack_is_rewritten_does_not_bring_the_answer_back_on_s3(harness, monkeypatch):
    script = Script(["bad", "good"], down={"bad"})
    with pytest.raises(ConnectionError):  # try 1: "bad" recorded, the try fails and packs it
        harness.run(answering_agent(script), PROMPT)

    def die(store: StepStore, attempt: int) -> None:
        raise Killed

    with monkeypatch.context() as patch:  # try 2 forgets "bad" and dies as it starts rewriting the pack
        patch.setattr(StepStore, "pack", die)
        with pytest.raises(Killed):
            harness.run(answering_agent(script), PROMPT)
    assert any(key.startswith("pack-") for key in harness.object_names()), "the old pack still holds the answer"

    result, run, _ = harness.run(answering_agent(script), PROMPT)

    assert (result.output, script.asked, run.stats.replayed.model) == ("good", 2, 0)
    run.finish()
    assert harness.object_names() == []


def test_a_zombie_pack_does_not_bring_a_forgotten_answer_back_on_s3(harness):
    script = Script(["bad", "good"], down={"bad"})
    zombie, _ = harness.open()
    with pytest.raises(ConnectionError):
        run_agent(zombie, answering_agent(script), PROMPT)
    with pytest.raises(UnexpectedModelBehavior):
        harness.run(answering_agent(script), PROMPT)
    zombie.pack_for_next_try()
    assert sum(key.startswith("pack-") for key in harness.object_names()) == 2  # try 2 (the tombstone), the zombie

    result, run, _ = harness.run(answering_agent(script), PROMPT)

    assert (result.output, script.asked, run.stats.replayed.model) == ("good", 2, 0)
    run.finish()
    assert harness.object_names() == []
