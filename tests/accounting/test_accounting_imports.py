"""accounting/ is pure math: importing it must not import torch (docs/design.md, house rule 1)."""

from __future__ import annotations

import subprocess
import sys


def test_accounting_does_not_import_torch():
    code = "import sys, tokendp.accounting; sys.exit(1 if 'torch' in sys.modules else 0)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
