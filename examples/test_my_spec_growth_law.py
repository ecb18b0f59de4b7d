"""Define your own parameterisation as data and test a growth law for it (run: pytest examples/).

The model: a depth-3 factorized QK circuit (W_QK = W_1 W_2 W_3, rank 1, unbalanced init) and the
query attending to itself, with a collapsed OV circuit. ``qkdyn.check`` first confirms that the
derived reduced flow is the full model's gradient flow (autograd on the full matrices, to round-off);
then the conjecture: with a collapsed OV circuit the margin ov grows like log t whatever the QK
circuit is (the OV rate factor is constant, so dominant balance gives e^ov ~ t), for any rho in
[1, 100]. The same file works for any spec: edit ``SPEC`` (or load one: ``qkdyn.load_spec(path)``).
"""
import os

from hypothesis import given, settings

import qkdyn
from qkdyn import testing

SPEC = qkdyn.Spec("deep_qk_self", qk=qkdyn.CircuitSpec("factorized", depth=3, imbalance=2.0), self_attention=True)
#: QKDYN_EXAMPLES_FAST=1 (set by the project's test suite) runs fewer examples
EXAMPLES = 2 if os.environ.get("QKDYN_EXAMPLES_FAST") else 8


def test_the_reduced_flow_is_the_full_models():
    result = qkdyn.check(SPEC)
    assert result.passed, str(result)


@settings(max_examples=EXAMPLES, deadline=None)
@given(setting=testing.setting_strategy(classes=(2, 5), distinct=(1, 5), commons=(1, 8), m=(1, 8), n=(1, 8),
                                        scale=1.0, qk0=(0.05, 1.0), ov0=(0.05, 1.0)),
       rho=testing.rhos(min_value=1.0, max_value=100.0))
def test_ov_grows_like_log_t(setting, rho):
    trajectory = qkdyn.solve(setting.replace(eta_qk=rho * setting.eta_ov), SPEC, t_max=1e300, points=300)
    testing.assert_grows_like(trajectory, "ov", "log t", window=(1e100, 1e300))
