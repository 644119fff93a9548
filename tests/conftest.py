"""Fixtures shared by the job tests: tiny backends built with the test module's ``OPTIONS``."""

from __future__ import annotations

import pytest

import tinylm


@pytest.fixture(scope="module")
def tiny(request):
    """The tiny model with the module's ``OPTIONS`` (its tokendp.json)."""
    return tinylm.backend(request.module.OPTIONS)


@pytest.fixture(scope="module")
def copier(request):
    """:class:`tinylm.CopyLM`, the "perfect copier", with the module's ``OPTIONS``."""
    return tinylm.backend(request.module.OPTIONS, copier=True)
