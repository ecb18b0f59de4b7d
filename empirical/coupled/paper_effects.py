"""Paper B's reported effects as the numbers its claims are judged against (log perplexity).

Perplexities are compared on the log scale: log ppl(a) - log ppl(b) is the difference in validation
loss (nats per token), about the relative change (-0.066 = -6.6%).

* :data:`HEADLINE`: the paper's 60M gain of coupled over standard attention, -6.6% -> log(1 / 0.934);
* :data:`SAME_MARGIN`: half of it, the margin of every "same results" claim (a difference smaller than
  half of what coupling is claimed to do cannot change the paper's conclusions) and of "Differential
  Attention reaches standard attention's perplexity" (B7's premise);
* :data:`SMALLEST`: the smallest effect the paper reports for each comparison (an interval wholly short
  of it fails the claim):

  - lower perplexity than standard: 1.0% (350M: 19.35 vs 19.55) -> log(19.55 / 19.35);
  - coupled vs MLP-only: 60M 22.62 (worst coupled) vs 23.81 -> log(23.81 / 22.62);
  - coupled vs Differential Attention: 150M 20.12 vs 21.11 -> log(21.11 / 20.12);
  - corpus dependence: PubMed -4.5% vs OpenWebText +10.3% -> log(1.103) - log(0.955);
  - sample efficiency: standard needs 2.4x the tokens -> log(2.4) on the log token ratio;
  - seed spread (power plan only): std 0.04 vs 0.31 -> log variance ratio 2 log(0.31 / 0.04);

* :data:`ATTENTION_FLOOR`: the smallest loss cost of removing attention (nats per token) for a
  language-modelling claim: ten times the paper's smallest effect, so an attention variant has room to
  change the loss by it.
"""
from __future__ import annotations

import math

HEADLINE = math.log(1 / (1 - 0.066))
SAME_MARGIN = HEADLINE / 2
SMALLEST = {
    "standard": math.log(19.55 / 19.35),
    "mlp-only": math.log(23.81 / 22.62),
    "diff": math.log(21.11 / 20.12),
    "corpus": math.log(1.103) - math.log(0.955),
    "efficiency": math.log(2.4),
    "variance": 2 * math.log(0.31 / 0.04),
}
ATTENTION_FLOOR = 10 * SMALLEST["standard"]
