"""docs/vault.md runs as written (issue 46): every ```bash block of the page, in order, in one
shell, against a served vault (the tiny model) on localhost, with ``tokendp`` this checkout's and
curl the machine's. A request the server refuses fails the run (curl is given
``--fail-with-body``), as does a command that exits non-zero. The section on several hosts is
left out: it needs a PostgreSQL host and installs packages."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.service.conftest import SRC, Server

pytestmark = pytest.mark.slow

PAGE = Path(__file__).resolve().parents[3] / "docs" / "vault.md"
LEFT_OUT = {"Several hosts: PostgreSQL": "a PostgreSQL host, pip install"}


def blocks(page: str) -> list[str]:
    """The page's ```bash blocks, in order, but those of the sections :data:`LEFT_OUT`."""
    out, section = [], ""
    for part in re.split(r"(^## .*$)", page, flags=re.MULTILINE):
        if part.startswith("## "):
            section = part[3:].strip()
        elif section not in LEFT_OUT:
            out += re.findall(r"^```bash\n(.*?)^```", part, flags=re.MULTILINE | re.DOTALL)
    return out


def test_every_example_of_the_vault_page_runs_as_written(tmp_path):
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    script = "\n".join(blocks(PAGE.read_text(encoding="utf-8")))
    assert "keys create" in script and "/v1/ask" in script and "vault add" in script
    server = Server(tmp_path / "tokendp-service.db", tmp_path / "server.log").start()  # the default --db, here
    try:
        port = server.url.rsplit(":", 1)[1]
        prelude = (f'tokendp() {{ "{sys.executable}" -m tokendp "$@"; }}\n'
                   'curl() { command curl --fail-with-body "$@"; }\nset -euo pipefail\n')
        run = subprocess.run(["bash", "-c", prelude + script.replace("localhost:8000", f"127.0.0.1:{port}")],
                             cwd=tmp_path, capture_output=True, text=True, timeout=600,
                             env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(SRC), "HF_HUB_OFFLINE": "1",
                                  "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1", "HOME": str(tmp_path)})
    finally:
        server.stop()
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert run.stdout.count('"report"') >= 5 and "event: error" not in run.stdout  # 2 rewrites, 3 answers
