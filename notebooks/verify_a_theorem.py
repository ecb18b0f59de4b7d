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
# # Verify a theorem in 10 minutes
#
# Claim A4 of paper A says: *a faster query-key circuit (larger rho = eta_QK / eta_OV) gives sharper
# attention at the same loss.* `qkdyn` proves it symbolically, and here we check it numerically in
# three steps: the first integral the proof rests on (A2), the attention at matched loss over a grid
# of rho (closed form, no ODE), and the same numbers from the ODE. Symbols as in
# [docs/setting.md](../docs/setting.md).

# %%
import matplotlib.pyplot as plt
import numpy as np

import qkdyn
from qkdyn import figures  # applies the qkdyn style sheet

setting = qkdyn.Setting()  # K=4, D=10, N=10, m=8, n=24, s=1, qk0=ov0=0.01
derived = qkdyn.derive("FAFO")
phi, psi = derived.line
print("Phi(qk) =", phi)
print("Psi(ov) =", psi)

# %% [markdown]
# ## 1. The first integral holds along the flow
# Phi(qk) - rho Psi(ov) must stay constant; `Trajectory.drifts()` measures every conserved quantity.

# %%
for rho in (0.1, 1.0, 10.0):
    tr = qkdyn.solve(setting.replace(eta_qk=rho * setting.eta_ov), "FAFO", t_max=1e8, points=100)
    drifts = tr.drifts()
    print(f"rho = {rho:>4}: largest relative drift {max(drifts.values()):.1e}")
    assert max(drifts.values()) < 1e-8

# %% [markdown]
# ## 2. Attention at matched loss, in closed form
# `grid=True` takes every combination of rho and loss level; the result exports to xarray with
# named axes.

# %%
rhos = np.geomspace(0.1, 10, 7)
grid = qkdyn.sharpness(setting, "FAFO", rho=rhos, loss=[0.1, 1e-2, 1e-3], grid=True)
table = grid.to_xarray()
print(table.attn.round(4).to_pandas())
assert np.all(np.diff(grid.attn, axis=0) > 0), "attention must rise with rho at every loss level"

# %% [markdown]
# ## 3. The same numbers from the ODE
# Solve until the loss reaches 1e-2 and compare the attention at that moment.

# %%
worst = 0.0
for rho in rhos[::3]:
    tr = qkdyn.solve(setting.replace(eta_qk=rho * setting.eta_ov), "FAFO", until_loss=1e-2)
    closed = float(table.attn.sel(rho=rho, loss=1e-2))
    worst = max(worst, abs(float(tr.attn[-1]) - closed))
print(f"largest difference ODE vs closed form: {worst:.1e}")
assert worst < 1e-6

# %% [markdown]
# ## A figure in the project's style

# %%
fig, ax = plt.subplots(figsize=(3.4, 2.6))
for level in table.loss.values:
    ax.semilogx(rhos, table.attn.sel(loss=level), marker="o", label=f"loss {level:g}")
ax.set(xlabel="rho = eta_QK / eta_OV", ylabel="attn at matched loss", title="FAFO: A4")
ax.legend()
assert figures.layout_problems(fig) == []
