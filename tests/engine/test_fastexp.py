"""Vectorisable exp/log of rtamt.engine.fastexp against numpy (correctly rounded to
within an ulp on this platform): float64 within 4 eps relative, float32 within the
documented bounds."""
from __future__ import annotations

import numpy as np
import pytest
from numba import njit

from rtamt.engine.fastexp import exp2_neg_f32, exp_f64, exp_f64_short, log_f64

EPS = np.finfo(np.float64).eps


@njit
def _map_exp(x, out):
    for i in range(x.size):
        out[i] = exp_f64(x[i])


@njit
def _map_exp_short(x, out):
    for i in range(x.size):
        out[i] = exp_f64_short(x[i])


@njit
def _map_log(x, out):
    for i in range(x.size):
        out[i] = log_f64(x[i])


@pytest.mark.parametrize("fn", [_map_exp, _map_exp_short], ids=["horner", "estrin"])
def test_exp_f64_within_4_ulp_and_underflows_to_zero(fn):
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.uniform(-708, 709, 200_000), rng.uniform(-1, 1, 200_000),
                        [0.0, -708.0, 709.0, 1e-300, -1e-300, 0.5 * np.log(2)]])
    out = np.empty_like(x)
    fn(x, out)
    ref = np.exp(x)
    # relative error in units of float64 epsilon (np.spacing would read 0 for subnormal
    # spacings once the thread flushes denormals, as rtamt's processing threads do)
    assert np.max(np.abs(out - ref) / ref) <= 4 * EPS
    below = np.array([-708.5, -745.0, -1e6])
    fn(below, out[:3])
    assert np.all(out[:3] == 0.0)


def test_log_f64_within_4_ulp():
    rng = np.random.default_rng(1)
    x = np.concatenate([10 ** rng.uniform(-307, 307, 200_000), rng.uniform(0.5, 2.0, 200_000),
                        [1.0, 2.0, 0.5, np.sqrt(2.0), np.nextafter(np.sqrt(2.0), 2), 1e-307]])
    out = np.empty_like(x)
    _map_log(x, out)
    ref = np.log(x)
    nz = ref != 0
    assert np.max(np.abs(out - ref)[nz] / np.abs(ref[nz])) <= 4 * EPS
    assert out[x == 1.0][0] == 0.0


@njit
def _map_exp2_neg32(x, out):
    for i in range(x.size):
        out[i] = exp2_neg_f32(x[i])


def test_exp2_neg_f32_relative_error():
    t = np.linspace(0, 124, 400_001).astype(np.float32)
    out = np.empty_like(t)
    _map_exp2_neg32(t, out)
    ref = 2.0 ** -t.astype(np.float64)
    assert np.max(np.abs(out - ref) / ref) < 2e-7
