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


@pytest.fixture(params=["cpu", "accelerator"])
def step_path(request, monkeypatch):
    """Run the test on the CPU's path of the step, then on the accelerator's (forced on the CPU
    by :func:`host_reads.force_accelerator_path`: no early exits, no host reads)."""
    if request.param == "accelerator":
        from host_reads import force_accelerator_path

        force_accelerator_path(monkeypatch)
    return request.param


@pytest.fixture
def transformers_bars():
    """transformers' progress bars on, as in a fresh process (an earlier command in this one may
    have turned them off), and back as they were after the test."""
    from transformers.utils import logging as hf_logging

    was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.enable_progress_bar()
    yield
    if not was_on:
        hf_logging.disable_progress_bar()
