"""Shared fixtures. RESGRAD_TEST_DEVICE picks the device the suite runs on: 'cpu'
(default) or 'cuda' (the GPU machine runs the suite again with it)."""
import os

import numpy as np
import pytest

import resgrad as rg

DEVICE = os.environ.get("RESGRAD_TEST_DEVICE", "cpu")


def open_ctx(**kw):
    kw.setdefault("quiet", True)
    return rg.Context(DEVICE, **kw)


@pytest.fixture
def ctx():
    c = open_ctx()
    yield c
    if not c.closed:
        c.close()


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def cuda_available():
    try:
        rg.Context("cuda", quiet=True).close()
        return True
    except rg.UnsupportedError:
        return False
