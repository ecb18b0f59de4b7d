"""qkdyn.empirical.adam: AdamW written out is torch.optim.AdamW on the CPU to the last bit, its state_dict is
torch's (a checkpoint of either resumes in the other), and constructing it imports no torch._dynamo."""
import subprocess
import sys

import pytest
import torch
from qkdyn.empirical.adam import PlainAdamW


def _model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.LayerNorm(5), torch.nn.Linear(5, 3))


def _groups(model: torch.nn.Module) -> list[dict]:
    """The coupled trainer's groups: matrices decay, vectors do not."""
    params = list(model.parameters())
    return [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]


def _steps(model, optimizer, first: int, count: int) -> None:
    """``count`` steps from step ``first``: a new learning rate at each (as the trainer's schedule sets it), the
    last layer's bias without a gradient at step 3 (its state must not move)."""
    for step in range(first, first + count):
        for group in optimizer.param_groups:
            group["lr"] = 1e-2 / (1 + step)
        optimizer.zero_grad(set_to_none=True)
        x = torch.randn(8, 6, generator=torch.Generator().manual_seed(step))
        model(x).square().mean().backward()
        if step == 3:
            model[2].bias.grad = None
        optimizer.step()


def _same(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))


def _torch_adamw(model):
    return torch.optim.AdamW(_groups(model), lr=1e-3, betas=(0.9, 0.95), fused=False)


def _plain_adamw(model):
    return PlainAdamW(_groups(model), lr=1e-3, betas=(0.9, 0.95))


def test_plain_adamw_is_torch_adamw_to_the_last_bit_with_the_same_state_dict():
    ours, theirs = _model(0), _model(0)
    optimizers = _plain_adamw(ours), _torch_adamw(theirs)
    for step in range(12):
        _steps(ours, optimizers[0], step, 1)
        _steps(theirs, optimizers[1], step, 1)
        assert _same(ours, theirs), step
    mine, torchs = (optimizer.state_dict() for optimizer in optimizers)
    assert mine["param_groups"] == torchs["param_groups"]
    assert mine["state"].keys() == torchs["state"].keys()
    for i, state in torchs["state"].items():
        assert mine["state"][i].keys() == state.keys()
        assert all(torch.equal(mine["state"][i][k], v) and mine["state"][i][k].dtype == v.dtype for k, v in state.items())


@pytest.mark.parametrize("saved_by", ["plain", "torch"])
def test_a_checkpoint_of_either_resumes_in_the_other_as_if_uninterrupted(saved_by):
    """5 steps, the optimizer's state_dict loaded into a fresh optimizer of the other kind (and the model's), 5 more
    steps: the same parameters as 10 steps of torch's AdamW alone."""
    reference = _model(1)
    _steps(reference, _torch_adamw(reference), 0, 10)
    first = _model(1)
    before = _plain_adamw(first) if saved_by == "plain" else _torch_adamw(first)
    _steps(first, before, 0, 5)
    resumed = _model(2)
    resumed.load_state_dict(first.state_dict())
    after = _torch_adamw(resumed) if saved_by == "plain" else _plain_adamw(resumed)
    after.load_state_dict(before.state_dict())
    _steps(resumed, after, 5, 5)
    assert _same(resumed, reference)


@pytest.mark.parametrize("kind", ["PlainAdamW", "PlainSGD"])
def test_zero_grad_drops_or_zeroes_the_gradients_as_torchs_does(kind):
    from qkdyn.empirical.synthetic.train import PlainSGD

    model = _model(0)
    optimizer = _plain_adamw(model) if kind == "PlainAdamW" else PlainSGD([{**group, "lr": 0.1} for group in _groups(model)])
    model(torch.ones(6)).sum().backward()
    optimizer.zero_grad(set_to_none=False)
    assert all(p.grad is not None and not p.grad.any() for p in model.parameters())
    optimizer.zero_grad()
    assert all(p.grad is None for p in model.parameters())


def test_a_state_dict_of_other_groups_is_refused():
    model = _model(0)
    optimizer = PlainAdamW(_groups(model))
    with pytest.raises(ValueError, match="other parameter groups"):
        optimizer.load_state_dict(PlainAdamW([{"params": list(model.parameters())}]).state_dict())


@pytest.mark.parametrize("damage", ["index", "shape", "not a tensor"])
def test_a_damaged_state_dict_is_a_value_error_and_leaves_the_state_as_it_was(damage):
    """What RunDir.restore turns into one line ("damaged"), never an IndexError or AttributeError traceback."""
    model = _model(0)
    optimizer = _plain_adamw(model)
    _steps(model, optimizer, 0, 2)
    saved, before = optimizer.state_dict(), {p: dict(state) for p, state in optimizer.state.items()}
    saved["param_groups"][0]["lr"] = 0.5
    state = saved["state"]
    if damage == "index":
        state[len(state) + 3] = state.pop(0)
    elif damage == "shape":
        state[0]["exp_avg"] = torch.zeros(2)
    else:
        state[0]["exp_avg_sq"] = [0.0]
    with pytest.raises(ValueError, match="parameter"):
        optimizer.load_state_dict(saved)
    assert optimizer.state == before and optimizer.param_groups[0]["lr"] != 0.5


def test_the_lm_trainer_on_the_cpu_never_imports_torch_dynamo():
    """The point of writing AdamW out: make_optimizer on the CPU (and a step) imports no torch._dynamo that the
    trainer's own imports had not; torch's AdamW, the control, does."""
    code = ("import sys, torch; from qkdyn.empirical.coupled.train import make_optimizer, TrainConfig; "
            "before = 'torch._dynamo' in sys.modules; m = torch.nn.Linear(3, 2); "
            "o = make_optimizer(m, TrainConfig(), 'cpu') if sys.argv[1] == 'qkdyn' else torch.optim.AdamW(m.parameters()); "
            "m(torch.ones(3)).sum().backward(); o.step(); print(before, 'torch._dynamo' in sys.modules)")
    ours, torchs = (subprocess.run([sys.executable, "-c", code, side], capture_output=True, text=True,
                                   check=True).stdout.split() for side in ("qkdyn", "torch"))
    if torchs[0] == "True":
        pytest.skip("this torch imports torch._dynamo with torch itself: there is nothing to save")
    assert torchs[1] == "True"  # the control: torch's AdamW imports it, and this check sees that
    assert ours[1] == "False"
