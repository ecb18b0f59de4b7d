"""The SQuAD attention metric averaged over the greedy answer's steps: a hand-made fixture with exact
numbers, their notebook's formulas transcribed beside ours, and the decoding against plain forwards."""
import numpy as np
import pytest
import torch
from qkdyn.empirical.circuits import evaluate, generation, metrics
from qkdyn.empirical.circuits.models import Decoder, ModelConfig
from qkdyn.empirical.circuits.presets import resolve
from qkdyn.empirical.circuits.train import Run
from repo_paths import FIXTURES


def causal(rows):
    return np.array([r + [0.0] * (len(rows) - len(r)) for r in rows])


#: two layers; the prompt has 3 positions (span: position 1), and the answer takes two steps
#: step 0 reads row 2 of 3 x 3 maps; step 1 reads row 3 of 4 x 4 maps (the generated token appended)
STEP0 = [causal([[1.0], [0.5, 0.5], [0.0, 1.0, 0.0]]),
         causal([[1.0], [1.0, 0.0], [0.5, 0.0, 0.5]])]
STEP1 = [causal([[1.0], [0.5, 0.5], [0.0, 1.0, 0.0], [0.0, 0.5, 0.0, 0.5]]),
         causal([[1.0], [1.0, 0.0], [0.5, 0.0, 0.5], [0.0, 0.0, 0.0, 1.0]])]
SPAN = (1,)


def their_rollout(maps, alpha):
    """GPT2 SQuAD heatmaps notebooks, cell 10 ``rollout_single_step`` (head mean already taken)."""
    attentions = []
    for attn in maps:
        attn = alpha * attn + (1 - alpha) * np.eye(attn.shape[0])
        attentions.append(attn / (attn.sum(-1, keepdims=True) + 1e-12))
    rollout = attentions[0]
    for attn in attentions[1:]:
        rollout = attn @ rollout
    return rollout / (rollout.sum(-1, keepdims=True) + 1e-12)


def test_masses_averaged_over_steps_by_hand():
    """Layer average: step 0 (1 + 0) / 2 = 1/2, step 1 (1/2 + 0) / 2 = 1/4: mean 3/8. Max-pool: 1, 1/2: 3/4.
    Rollout (alpha 1/2), row r of A'_2 A'_1: step 0, A'_2 row 2 = (1/4, 0, 3/4), A'_1 column 1 = (0, 1/4, 1/2):
    3/8; step 1, A'_2 row 3 = (0, 0, 0, 1), A'_1 row 3 = (0, 1/4, 0, 3/4): 1/4. Mean 5/16."""
    rows = [generation.last_rows(STEP0), generation.last_rows(STEP1)]
    out = generation.example_masses(rows, SPAN)
    assert out["layer_average"] == pytest.approx(3 / 8) and out["layer_maxpool"] == pytest.approx(3 / 4)
    assert out["rollout"] == pytest.approx(5 / 16)
    assert out["per_layer"] == pytest.approx([(1 + 1 / 2) / 2, 0])
    assert out["first_step"] == pytest.approx({"layer_average": 1 / 2, "rollout": 3 / 8, "layer_maxpool": 1})
    assert out["steps"] == 2
    for maps in (STEP0, STEP1):  # their formula, and qkdyn's full rollout (the <a>-row reading), give the same rows
        assert generation.rollout_row(maps, len(maps[0]) - 1) == pytest.approx(their_rollout(maps, 0.5)[-1])
        assert generation.rollout_row(maps, len(maps[0]) - 1) == pytest.approx(metrics.rollout(maps)[-1])
    assert generation.rollout_row(STEP1, 3, alpha=1.0) == pytest.approx(their_rollout(STEP1, 1.0)[-1])
    with pytest.raises(ValueError, match="step"):
        generation.example_masses([], SPAN)


def test_uniform_reference_and_summary_by_hand():
    """Uniform attention over the same two steps: layer average 1/3 then 1/4; rollout of two uniform layers,
    row 2 on position 1: A' rows (1), (1/4, 3/4), (1/6, 1/6, 2/3), so 1/6 * 3/4 + 2/3 * 1/6 = 17/72."""
    uniform = generation.uniform_example(3, 2, 2, SPAN)
    assert uniform["layer_average"] == pytest.approx((1 / 3 + 1 / 4) / 2)
    assert uniform["first_step"]["rollout"] == pytest.approx(17 / 72)
    measured = generation.example_masses([generation.last_rows(STEP0), generation.last_rows(STEP1)], SPAN)
    out = generation.summarise([measured, measured], [uniform, uniform])
    assert out["mass"]["layer_average"] == pytest.approx(3 / 8) and out["n"] == 2 and out["mean_steps"] == 2
    assert out["uniform"]["layer_average"] == pytest.approx(7 / 24) and out["alpha"] == 0.5
    assert out["uniform_first_step"]["rollout"] == pytest.approx(17 / 72)
    empty = generation.summarise([], [])
    assert np.isnan(empty["mass"]["rollout"]) and empty["n"] == 0


def test_decoding_reads_each_step_from_a_plain_forward():
    """Every step's rows are those of a forward pass over the prompt and the tokens generated so far; a
    prompt's decoding stops at <eos> (its step counted, the token not), at max_answer_len, or before the
    input would reach max_len (none at all for a prompt that long)."""
    torch.manual_seed(0)
    model = Decoder(ModelConfig(vocab_size=12, n_out=0, max_len=9, d_model=8, n_head=2, n_layer=2, layernorm=True,
                                head="lm"))
    model.eval()

    def forward(seq):
        with torch.no_grad():
            logits, atts = model(torch.tensor([seq]), torch.tensor([len(seq)]))
        return int(logits[0, -1].argmax()), generation.last_rows([a[0].mean(0).numpy() for a in atts])

    prompts = [[1, 2, 3, 4], [5, 6], [1, 2, 3, 4, 5, 6, 7], [1, 2, 3, 4, 5, 6, 7, 8, 9]]
    eos = forward(prompts[0])[0]  # the first prompt's first token: it stops at once
    answers, steps = generation.greedy_with_attention(model, prompts, eos=eos, max_answer_len=4)
    assert (len(steps[0]), len(steps[2]), len(steps[3])) == (1, 2, 0) and 1 <= len(steps[1]) <= 4
    assert answers[0] == [] and answers[3] == []
    for prompt, answer, rows in zip(prompts, answers, steps, strict=True):
        seq, tokens = list(prompt), []
        for step in rows:
            token, expected = forward(seq)
            for key in (*generation.METHODS, "per_layer"):
                assert step[key] == pytest.approx(expected[key], abs=1e-6)
            tokens.append(token)
            seq.append(token)
        assert answer == [t for t in tokens if t != eos] and (eos in tokens) == (tokens[-1:] == [eos])
        assert eos in tokens or len(tokens) == 4 or len(seq) == model.cfg.max_len


def test_first_step_is_the_a_row_metric_of_the_qa_evaluation():
    cfg = resolve("squad", "tiny", {"data": str(FIXTURES / "circuits" / "squad"), "n_layer": 2, "layernorm": True,
                                    "max_len": 64, "max_answer_len": 3})
    run = Run(cfg)
    out = run.evaluate(run.test, full=True)
    gen = out["generation"]
    assert gen["n"] == out["n"] and 1 <= gen["mean_steps"] <= cfg.max_answer_len
    for method in generation.METHODS:
        assert gen["first_step"][method] == pytest.approx(out["attention_mass_by_method"][method], abs=1e-6)
        assert gen["uniform_first_step"][method] == pytest.approx(out["uniform_mass_by_method"][method])
    assert evaluate.primary_method(cfg.n_layer) == "layer_average"
