"""Check a new conjecture: integrate a setting, test a law on a late window, print a verdict.

    python examples/check_conjecture.py [--fast]

Conjecture (made up for the example): "in CACO the attention odds attn / (1 - attn) grow like
(log t)^2, whatever rho". We solve the flow to t = 1e300 for a few rho (log time: no dearer than 1e40)
and check the law with ``qkdyn.testing.check_growth`` on t in [1e100, 1e300]: its criteria are a
positive slope, a small residual, and the law told apart from every rival law of another order
(log t, log t log log t, ...), none of which fits decisively better. The conjecture holds for a rho
when every criterion passes (a criterion may also say that the window cannot distinguish the law from
a rival, or that the trajectory is still in transit there: then that rho is inconclusive).
Replace the setting, the quantity or the law to test your own.
"""
import sys

import qkdyn
from qkdyn import testing


def main(fast: bool = False) -> int:
    rhos = (1.0, 10.0) if fast else (0.1, 1.0, 10.0, 100.0)
    held = []
    for rho in rhos:
        trajectory = qkdyn.solve(qkdyn.Setting(eta_qk=rho), "CACO", t_max=1e300, points=300)
        criteria = testing.check_growth(trajectory, "odds", "(log t)^2", window=(1e100, 1e300))
        held.append(testing.verdict(criteria))  # passed, failed, cannot distinguish, or in transit
        print(f"rho = {rho:>5g}: " + "; ".join(str(c) for c in criteria))
    decided = [outcome for outcome in held if outcome in (testing.PASSED, testing.FAILED)]
    verdict = ("inconclusive" if len(decided) < len(held) and testing.FAILED not in decided else
               "holds" if all(o == testing.PASSED for o in held) else
               "fails" if all(o == testing.FAILED for o in decided) else "partial")
    print(f"conjecture 'odds ~ (log t)^2 in CACO': {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main(fast="--fast" in sys.argv))
