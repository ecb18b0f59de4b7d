"""The training loop (:func:`qkdyn.empirical.synthetic.train.train`) differentiates only the parts of the matrices
that reach the loss (:func:`.train.loss_parts`) and updates them in place: every parameter must come out equal,
bit for bit, to the textbook step on the whole matrices (``backward`` into ``.grad``, torch's optimiser's ``step``)."""
import pytest
import torch
from qkdyn.empirical.synthetic import stability, train
from qkdyn.empirical.synthetic.model import PARAMS, cross_entropy
from qkdyn.theory.setting import Setting

SMALL = Setting(classes=3, distinct=3, commons=2, m=3, n=4, qk0=0.5, ov0=0.5, eta_qk=2.0)
STEPS = 25


def _textbook(model, kind: str, batch: int | None) -> None:
    """torch's own optimiser (SGD, or Adam: what PlainSGD and PlainAdam write out) on the whole matrices."""
    groups = [{"params": model.circuit_parameters("QK"), "lr": 0.05 * SMALL.eta_qk},
              {"params": model.circuit_parameters("OV"), "lr": 0.05 * SMALL.eta_ov}]
    optimizer = torch.optim.Adam(groups, lr=0.05) if kind == "adam" else torch.optim.SGD(groups, lr=0.05)
    next_batch = train.batch_source(SMALL, batch, 0)
    for _ in range(STEPS):
        counts, labels, weights = next_batch()
        optimizer.zero_grad(set_to_none=True)
        cross_entropy(model.forward_log(torch.log(counts))[0], labels, weights).backward()
        optimizer.step()


@pytest.mark.parametrize("param", PARAMS)
@pytest.mark.parametrize("kind, batch", [("gd", None), ("sgd", 8), ("adam", 8)])
def test_training_the_loss_parts_is_the_step_on_the_whole_matrices_to_the_last_bit(param, kind, batch):
    # a start off the symmetric subspace, so that every entry that reaches the loss has its own gradient
    fast, slow = (stability.perturbed_model(SMALL, param, 1e-2, seed=4) for _ in range(2))
    optimizer = train.make_optimizer(fast, kind, 0.05, SMALL.eta_qk, SMALL.eta_ov)
    rows = train.train(fast, optimizer, train.batch_source(SMALL, batch, 0), STEPS, [0, STEPS], lambda m: {})
    _textbook(slow, kind, batch)
    assert [row["step"] for row in rows] == [0, STEPS]
    moved = False
    for (name, a), b, start in zip(fast.named_parameters(), slow.parameters(),
                                   stability.perturbed_model(SMALL, param, 1e-2, seed=4).parameters(), strict=True):
        assert torch.equal(a, b), name
        moved |= not torch.equal(a, start)
    assert moved  # the comparison covers steps that changed the matrices
