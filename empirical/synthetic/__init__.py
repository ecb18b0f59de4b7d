"""The full matrix model of the canonical setting (docs/setting.md section 1) in torch.

Modules, one job each:
    layout      token indices of the one-hot vocabulary
    model       the attention head (CACO/FACO/CAFO/FAFO), evaluated from token-count vectors
    data        batches: sampled, mean-count, exact count-vector support, brute-force sequences
    reduced     canonical init, reduced state <-> matrices (embedding, orbit-averaged reading)
    train       per-circuit optimiser groups and the training loop
    observe     one CSV row of docs/setting.md section 2 from the current matrices
    experiment  one run from the canonical init, and its distance from the ODE
    sampled     SGD on a sampled generator, schedules, matched-loss measurements (attention, shortcut)
    clean       the ``clean`` sampled generator (a cleaned-up variant of the authors' task)
    authors     the ``authors`` sampled generator (their notebooks' ids, loss, inits, rates, lengths)
    claims_sampled  A4-/A5-sampled on both generators, over seeds
    plots       the figures of A6 and of the sampled experiments
    claim_a6    the A6 measurements and their judgement (claims A6, A6-adam)
    fixed_attention  the fixed-attention experiment (claim FA) beside the frozen-QK flow
    study       the studies ``a6``, ``sampled`` and ``fixed-attention`` (:mod:`qkdyn.studies`)
"""
