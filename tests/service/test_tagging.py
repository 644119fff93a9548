"""/v1/tag's tagger process on its own: the server's tagger's spans, and a fresh process after
one dies."""

from __future__ import annotations

import asyncio
import os
import signal
from concurrent.futures.process import BrokenProcessPool

import pytest

from tests.service.conftest import LETTER
from tokendp.service.tagging import Tagging
from tokendp.text.taggers import get_tagger


@pytest.fixture
def tagging():
    tagging = Tagging("auto")
    tagging.start()
    yield tagging
    tagging.stop()


def test_the_process_gives_the_spans_of_the_servers_tagger(tagging):
    assert asyncio.run(tagging.tag(LETTER)) == [s.to_dict() for s in get_tagger("auto").tag(LETTER)]


def test_a_killed_tagger_process_fails_its_request_and_the_next_one_starts_a_fresh_process(tagging):
    asyncio.run(tagging.tag(LETTER))
    (pid,) = tagging._pool._processes  # the one worker process
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(BrokenProcessPool):
        asyncio.run(tagging.tag(LETTER))
    assert asyncio.run(tagging.tag(LETTER))
