"""Per-head attention measures on hand-made maps, by hand; and their place in a training run's logs."""
import json
import math

import numpy as np
import pytest
import torch
from qkdyn.empirical.circuits import heads
from qkdyn.empirical.circuits.presets import resolve
from qkdyn.empirical.circuits.train import Run, train
from repo_paths import FIXTURES

#: one layer, three heads on a sequence of 4 tokens: a previous-token head, an induction head (row 3,
#: token 5, looks at position 1, the token after the earlier 5; the other rows at themselves), uniform attention
PREVIOUS = [[1, 0, 0, 0], [1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0]]
INDUCTION = [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 1, 0, 0]]
UNIFORM = [[1, 0, 0, 0], [1 / 2, 1 / 2, 0, 0], [1 / 3, 1 / 3, 1 / 3, 0], [1 / 4] * 4]
MAPS = np.array([[PREVIOUS, INDUCTION, UNIFORM]], dtype=float)
IDS, READ, RATIONALES = [5, 6, 7, 5], 3, ((0, 3), (2,))  # annotator 1 without the read-out: position 0 alone



def test_measures_of_previous_token_induction_and_uniform_heads_by_hand():
    m = heads.sequence_measures(MAPS, IDS, READ, RATIONALES)
    log2, log3, log4 = math.log(2), math.log(3), math.log(4)
    assert m["entropy"] == pytest.approx(np.array([[0, 0, (log2 + log3 + log4) / 3]]))
    assert m["readout_entropy"] == pytest.approx(np.array([[0, 0, log4]]))
    assert m["previous_token"] == pytest.approx(np.array([[1, 0, (1 / 2 + 1 / 3 + 1 / 4) / 3]]))
    assert m["first_token"] == pytest.approx(np.array([[1 / 3, 0, (1 / 2 + 1 / 3 + 1 / 4) / 3]]))  # rows 1-3 on 0
    assert m["rationale"] == pytest.approx(np.array([[(0 + 1) / 2, (0 + 0) / 2, (1 / 4 + 1 / 4) / 2]]))
    assert m["induction"] == pytest.approx(np.array([[0, 1, 1 / 4]]))  # row 3 only: its 5 occurred at 0, target 1
    assert heads.induction_targets(IDS).nonzero() == (np.array([3]), np.array([1]))
    assert heads.induction_targets([4, 4, 4]).nonzero() == (np.array([2]), np.array([1]))  # j < i - 1: not itself


def test_summary_averages_where_defined_and_carries_uniform_attention_beside_it():
    """A one-token sequence defines only the read-out entropy (0): it enters that mean and no other."""
    single = (np.ones((2, 3, 1, 1)), [9], 0, ((0,),))
    two_layers = np.concatenate([MAPS, np.array([[UNIFORM] * 3], dtype=float)])
    out = heads.summarise([(two_layers, IDS, READ, RATIONALES), single])
    assert out["n"] == 2
    m = heads.sequence_measures(two_layers, IDS, READ, RATIONALES)
    for key in ("entropy", "previous_token", "first_token", "rationale", "induction"):
        assert np.array(out[key]) == pytest.approx(m[key]), key
        assert out["uniform"][key] == pytest.approx(m[key][1, 2]), key  # layer 2 is uniform in every head
    assert np.array(out["readout_entropy"]) == pytest.approx(m["readout_entropy"] / 2)
    assert out["uniform"]["readout_entropy"] == pytest.approx(math.log(4) / 2)
    none = heads.summarise([single])
    assert none["entropy"] is None and none["uniform"]["induction"] is None and none["readout_entropy"] == [[0.0] * 3] * 2
    json.dumps(out, allow_nan=False)  # plain JSON: None, never NaN, where undefined


def test_non_finite_attention_propagates_and_bad_shapes_are_refused():
    broken = MAPS.copy()
    broken[0, 1, 3] = np.nan
    out = heads.summarise([(broken, IDS, READ, RATIONALES), (MAPS, IDS, READ, RATIONALES)])
    assert math.isnan(out["induction"][0][1]) and out["induction"][0][0] == 0
    with pytest.raises(ValueError, match="one sequence"):
        heads.sequence_measures(MAPS[0], IDS, READ, RATIONALES)
    with pytest.raises(ValueError, match="one sequence"):
        heads.sequence_measures(MAPS, IDS, 4, RATIONALES)


@pytest.mark.parametrize("task, data", [("vader", "vader"), ("squad", "squad")])
def test_every_evaluation_logs_head_measures_and_the_final_holds_them(tmp_path, task, data):
    cfg = resolve(task, "tiny", {"data": str(FIXTURES / "circuits" / data), "n_layer": 2})
    record = train(cfg, tmp_path, progress=False)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [2, 4, 6]
    for row in rows:
        assert len(row["dev_heads"]["entropy"]) == 2 and len(row["dev_heads"]["entropy"][0]) == cfg.n_head
    final = record.final["test"]["heads"]
    run = Run(cfg)
    run.model.load_state_dict(torch.load(tmp_path / "checkpoint.pt", weights_only=True)["model"])
    assert run.head_measures(run.test) == final  # the final numbers are the trained model's on the test split
    assert final["n"] == record.final["test"]["n"]
    # a tiny model after 6 steps attends almost uniformly: every head near uniform attention's entropy
    assert np.allclose(final["entropy"], final["uniform"]["entropy"], atol=1e-3)
