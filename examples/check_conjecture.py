"""Check a new conjecture: integrate a setting, fit a law, print a verdict.

    python examples/check_conjecture.py [--fast]

Conjecture (made up for the example): "in CACO the attention odds attn / (1 - attn) grow like
log^2 t, whatever rho". We solve the flow to t = 1e40 for a few rho, fit the candidate families
(log t, log^2 t, log log t, t^a) on a late window, and call the conjecture held when log^2 t fits
best for every rho. Replace the setting, the quantity or the law to test your own.
"""
import sys

import numpy as np

import qkdyn
from qkdyn.simulate import growth


def main(fast: bool = False) -> int:
    rhos = (1.0, 10.0) if fast else (0.1, 1.0, 10.0, 100.0)
    held = []
    for rho in rhos:
        trajectory = qkdyn.solve(qkdyn.Setting(eta_qk=rho), "CACO", t_max=1e40, points=300)
        late = trajectory.t >= 1e30
        odds = np.exp(trajectory.log_odds[late])
        fits = growth.fit_families(trajectory.t[late], odds)
        best = growth.best_family(fits)
        held.append(best == "log^2 t")
        print(f"rho = {rho:>5g}: best family {best:10s} (relative rms residual {fits[best]['rel_rms']:.2e})")
    verdict = "holds" if all(held) else "fails" if not any(held) else "partial"
    print(f"conjecture 'odds ~ log^2 t in CACO': {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main(fast="--fast" in sys.argv))
