"""The synthetic model's forward pass and loss are written once (:mod:`qkdyn.empirical.synthetic.model`).

Structure: no other module of the synthetic package calls a primitive of the forward pass or the loss (softmax,
log-softmax, logsumexp, cross-entropy, the batched products bmm / baddbmm / einsum); the modules that train many
runs at once evaluate the model's own functions on their stacks; the authors' layers and the full flow's closed
forms (which evaluate the model on parameterisations of their own) call the model's functions and hold no piece of
a softmax or a log-softmax loss (not even an exp or a log). Numbers: those functions on a stack of runs equal
``torch.func.vmap`` of the one-run function, loss and gradient, for every form of the head; the hand-written
gradient (:func:`~qkdyn.empirical.synthetic.model.head_gradients`) equals autograd of the loss.
"""
import ast

import pytest
import torch
from qkdyn.empirical.synthetic import model
from qkdyn.theory.setting import factorized
from repo_paths import ROOT

PACKAGE = ROOT / "empirical" / "synthetic"
#: the calls that evaluate a piece of the forward pass or the loss
PRIMITIVES = {"softmax", "log_softmax", "logsumexp", "cross_entropy", "nll_loss", "bmm", "baddbmm", "einsum"}
#: calls of a primitive that are no piece of the forward pass, per module, with what they are (the list may only
#: shrink: an entry whose call is gone fails the test)
NOT_THE_FORWARD = {
    "fullflow.py": ({"np.einsum"}, "the Jacobian of the factors and the bilinear terms of the closed-form Hessian"),
}
#: the pieces of a softmax over the context or of a log-softmax loss, written by hand
SOFTMAX_PIECES = {"softmax", "log_softmax", "logsumexp", "cross_entropy", "nll_loss", "exp", "log", "log1p", "expm1"}
#: modules that evaluate the model on a parameterisation of their own (the authors' nn.Linear layers, the full
#: flow's active blocks and its closed-form gradient and Hessian): the model's functions each must call
REUSERS = {"authors.py": {"head", "log_counts"},
           "fullflow.py": {"loss", "attend", "probabilities", "cross_entropy", "log_counts"}}
#: the engines that train runs: each must evaluate the model's own loss or forward
ENGINES = {"stacked.py": {"head_gradients"}, "batched.py": {"head_gradients", "head"}, "fixed_attention.py": {"cross_entropy", "readout"},
           "train.py": {"exact_gradients"}, "sampled.py": {"cross_entropy", "probabilities"}}


def primitive_calls(path, primitives=PRIMITIVES) -> list[str]:
    """'line: name' of every call of one of ``primitives`` in the module at ``path`` that is not the model module's
    own function of that name (imported from it)."""
    tree = ast.parse(path.read_text())
    own = {alias.asname or alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
           and node.module == "qkdyn.empirical.synthetic.model" for alias in node.names}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        if isinstance(node.func, ast.Attribute) and node.func.attr in primitives:
            found.append(f"{node.lineno}: {ast.unparse(node.func)}")
        elif isinstance(node.func, ast.Name) and node.func.id in primitives and node.func.id not in own:
            found.append(f"{node.lineno}: {node.func.id}")
    return found


def model_imports(path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
            and node.module == "qkdyn.empirical.synthetic.model" for alias in node.names}


def test_no_module_but_the_model_evaluates_the_forward_pass():
    modules = sorted(p for p in PACKAGE.glob("*.py") if p.name != "model.py")
    assert len(modules) > 10 and (PACKAGE / "model.py").exists()
    assert primitive_calls(PACKAGE / "model.py")  # the scan sees the model's own primitives
    calls = {p.name: primitive_calls(p) for p in modules}
    allowed = {name: names for name, (names, _) in NOT_THE_FORWARD.items()}
    copies = {name: [c for c in found if c.split(": ")[1] not in allowed.get(name, ())] for name, found in calls.items()}
    assert {name: found for name, found in copies.items() if found} == {}
    for name, names in allowed.items():
        assert names <= {c.split(": ")[1] for c in calls[name]}, f"{name}: a call is gone, remove it from NOT_THE_FORWARD"


@pytest.mark.parametrize("module", sorted(REUSERS))
def test_the_authors_head_and_the_full_flow_restate_no_softmax_and_no_loss(module):
    assert primitive_calls(PACKAGE / module, SOFTMAX_PIECES) == []
    assert REUSERS[module] <= model_imports(PACKAGE / module)


def test_the_scan_finds_a_restated_forward_pass(tmp_path):
    restated = tmp_path / "restated.py"
    restated.write_text("import torch\nfrom torch import nn\nfrom qkdyn.empirical.synthetic.model import cross_entropy\n"
                        "def f(u, W, c, o, v, y):\n"
                        "    attn = torch.softmax(torch.bmm(u, W) + c, dim=-1)\n"
                        "    return nn.functional.cross_entropy(attn @ (o @ v).mT, y) + cross_entropy(attn, y)\n")
    assert sorted(c.split(": ")[1] for c in primitive_calls(restated)) == ["nn.functional.cross_entropy", "torch.bmm",
                                                                           "torch.softmax"]


def test_the_scan_finds_a_softmax_and_a_loss_written_by_hand(tmp_path):
    """The full flow's former numpy twin: a softmax over the context and -log q_label, from exp and log."""
    restated = tmp_path / "restated.py"
    restated.write_text("import numpy as np\n"
                        "def forward(a, log_counts, B, labels, weights):\n"
                        "    u = a[None, :] + log_counts\n"
                        "    p = np.exp(u - u.max(axis=-1, keepdims=True))\n"
                        "    p /= p.sum(axis=-1, keepdims=True)\n"
                        "    z = p @ B.T\n"
                        "    q = np.exp(z - z.max(axis=-1, keepdims=True))\n"
                        "    q /= q.sum(axis=-1, keepdims=True)\n"
                        "    return -(np.log(q[np.arange(len(labels)), labels]) @ weights)\n")
    assert [c.split(": ")[1] for c in primitive_calls(restated, SOFTMAX_PIECES)] == ["np.exp", "np.exp", "np.log"]


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_every_engine_evaluates_the_model_s_own_functions(engine):
    assert ENGINES[engine] <= model_imports(PACKAGE / engine)


def _head(param: str, runs: int, generator, query_rows: int = 7, label_rows: int = 7) -> dict[str, torch.Tensor]:
    """Random matrices of form ``param`` (V = 7, r = 3), stacked over ``runs``; the query side (W_QK or W_Q) and the
    label side (W_OV or W_O) with ``query_rows`` and ``label_rows`` rows."""
    draw = lambda *shape: torch.randn(runs, *shape, generator=generator, dtype=torch.float64)  # noqa: E731
    qk, ov = factorized(param)
    return {**({"W_Q": draw(query_rows, 3), "W_K": draw(7, 3)} if qk else {"W_QK": draw(query_rows, 7)}),
            **({"W_O": draw(label_rows, 3), "W_V": draw(3, 7)} if ov else {"W_OV": draw(label_rows, 7)})}


@pytest.mark.parametrize("param", model.PARAMS)
@pytest.mark.parametrize("rows", ["one query id", "a query id per sample", "the held rows"])
def test_the_stacked_loss_is_the_one_run_loss_mapped_over_the_runs(param, rows):
    generator = torch.Generator().manual_seed(0)
    runs, batch = 4, 6
    held = rows == "the held rows"  # the matrices hold only the query's row and the labels' rows (query, labels None)
    matrices = _head(param, runs, generator, *((1, 2) if held else (7, 7)))
    log_counts = torch.log(torch.rand(runs, batch, 7, generator=generator, dtype=torch.float64))
    targets = torch.randint(2, (runs, batch), generator=generator)
    weights = torch.rand(runs, batch, generator=generator, dtype=torch.float64)
    slot = torch.randint(2, (runs, batch), generator=generator) if rows == "a query id per sample" else None
    query = {"one query id": 6, "a query id per sample": torch.tensor([5, 6]), "the held rows": None}[rows]
    labels = None if held else slice(2, 4)

    def one_run(matrices, log_counts, targets, weights, slot):
        return model.loss(matrices, log_counts, targets, weights, 0.7, query, labels, slot)

    slot_dim = None if slot is None else 0
    mapped = torch.func.vmap(one_run, in_dims=(0, 0, 0, 0, slot_dim))
    grads = torch.func.vmap(torch.func.grad(one_run), in_dims=(0, 0, 0, 0, slot_dim))
    leaves = {k: v.clone().requires_grad_() for k, v in matrices.items()}
    stacked = one_run(leaves, log_counts, targets, weights, slot)
    stacked.sum().backward()
    assert stacked.shape == (runs,)
    torch.testing.assert_close(stacked, mapped(matrices, log_counts, targets, weights, slot), rtol=1e-14, atol=0)
    for name, grad in grads(matrices, log_counts, targets, weights, slot).items():
        torch.testing.assert_close(leaves[name].grad, grad, rtol=1e-13, atol=1e-15)
    alone = one_run({k: v[1] for k, v in matrices.items()}, log_counts[1], targets[1], weights[1],
                    None if slot is None else slot[1])
    assert alone.shape == () and alone.item() == pytest.approx(stacked[1].item(), rel=1e-14)
    assert stacked[0].item() != pytest.approx(stacked[1].item())  # the runs differ: the comparison can fail


@pytest.mark.parametrize("rows", ["a query id per sample", "the held rows"])
@pytest.mark.parametrize("weighted", [True, False])
def test_the_written_out_gradient_is_autograd_s(rows, weighted):
    """head_gradients: the loss to the bit (the same operations), each factor's gradient to round-off, with a query row
    per sample (a one-hot selection of Q = 3 rows) or one held row, weighted or the mean over the batch."""
    generator = torch.Generator().manual_seed(1)
    runs, batch, per_sample = 4, 6, rows == "a query id per sample"
    matrices = _head("FAFO", runs, generator, 3 if per_sample else 1, 5)
    log_counts = torch.log(torch.rand(runs, batch, 7, generator=generator, dtype=torch.float64))
    targets = torch.randint(5, (runs, batch), generator=generator)
    weights = torch.rand(runs, batch, generator=generator, dtype=torch.float64) if weighted else None
    slot = torch.randint(3, (runs, batch), generator=generator) if per_sample else None
    leaves = {k: v.clone().requires_grad_() for k, v in matrices.items()}
    taped = model.loss(leaves, log_counts, targets, weights, 0.7, torch.arange(3) if per_sample else None, None, slot)
    taped.sum().backward()
    select = torch.nn.functional.one_hot(slot, 3).to(torch.float64) if per_sample else None
    written = model.head_gradients(matrices["W_Q"], matrices["W_K"], matrices["W_O"], matrices["W_V"], log_counts,
                                   targets, weights, 0.7, select)
    assert torch.equal(written.loss, taped.detach())
    for name in ("W_Q", "W_K", "W_O", "W_V"):
        torch.testing.assert_close(getattr(written, name), leaves[name].grad, rtol=1e-13, atol=1e-15)
        assert getattr(written, name).abs().max() > 1e-3  # every factor has a gradient: the comparison can fail
