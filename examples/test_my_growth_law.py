"""A researcher's own property test of a growth law, with qkdyn.testing (run: pytest examples/).

Claim checked: under gradient flow the output margin ov grows like the law ``qkdyn derive`` prints
for each parameterisation (log t with a collapsed OV circuit, log t + log log t with a factorized
one), for any setting and any learning-rate ratio rho in [1, 100]; and the flow conserves its first
integral. ``for_each_param`` runs every form, however few examples hypothesis draws. Narrow the
strategies to the settings you care about.
"""
import os

from hypothesis import given, settings

import qkdyn
from qkdyn import testing

#: QKDYN_EXAMPLES_FAST=1 (set by the project's test suite) runs fewer examples
EXAMPLES = 2 if os.environ.get("QKDYN_EXAMPLES_FAST") else 10


@testing.for_each_param()
@settings(max_examples=EXAMPLES, deadline=None)
@given(setting=testing.setting_strategy(classes=(2, 6), scale=1.0), rho=testing.rhos(min_value=1.0, max_value=100.0))
def test_ov_grows_like_the_derived_law(param, setting, rho):
    setting = setting.replace(eta_qk=rho * setting.eta_ov)
    trajectory = qkdyn.solve(setting, param, t_max=1e300, points=300)
    testing.assert_conserved(trajectory, rel=1e-7)
    testing.assert_grows_like(trajectory, "ov", qkdyn.derive(param).growth["ov"], window=(1e100, 1e300))
