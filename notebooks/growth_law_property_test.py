# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Your own growth-law property test
#
# `qkdyn.testing` gives hypothesis strategies for settings and learning-rate ratios, and assertions
# that a quantity grows like a law. A law is written as `qkdyn derive` prints it ("log t",
# "(log t)^2 log log t", ...). Each criterion (slope, fit, rivals) is checked on its own, and a
# failure says which one failed, with the numbers and what would have passed. A window that cannot
# tell the law from a rival of another order says so ("cannot distinguish"): the draw is skipped,
# never failed. Solve to t = 1e300 (log time: no dearer than 1e60) and check on 1e100-1e300, where
# the orders separate best.

# %%
from hypothesis import given, settings

import qkdyn
from qkdyn import testing

print("quantities by name:", ", ".join(testing.QUANTITIES))
for param in ("CACO", "FAFO"):
    print(param, qkdyn.derive(param).growth)

# %% [markdown]
# ## One trajectory, one law

# %%
tr = qkdyn.solve(qkdyn.Setting(), "FAFO", t_max=1e300, points=300)
for criterion in testing.check_growth(tr, "odds", "log t log log t", window=(1e100, 1e300)):
    print(criterion)

# %% [markdown]
# ## A property over settings and rho
# In a pytest file, add `@testing.for_each_param()` to run every parameterisation; here we loop.

# %%
@settings(max_examples=3, deadline=None)
@given(setting=testing.setting_strategy(classes=(2, 6), scale=1.0), rho=testing.rhos(min_value=1, max_value=100))
def ov_grows_like_the_derived_law(setting, rho, param):
    tr = qkdyn.solve(setting.replace(eta_qk=rho * setting.eta_ov), param, t_max=1e300, points=300)
    testing.assert_grows_like(tr, "ov", qkdyn.derive(param).growth["ov"], window=(1e100, 1e300))


for param in ("CACO", "CAFO"):
    ov_grows_like_the_derived_law(param=param)
print("held for CACO and CAFO")

# %% [markdown]
# ## A wrong law is caught, and the message says why
# The paper's reading "e^qk ~ (log t)^2" fails for a factorized OV circuit:

# %%
try:
    testing.assert_grows_like(tr, "exp(qk)", "(log t)^2", window=(1e100, 1e300))
except AssertionError as failure:
    print(failure)
    assert "criterion 'rivals' failed" in str(failure)
else:
    raise RuntimeError("the wrong law passed")
