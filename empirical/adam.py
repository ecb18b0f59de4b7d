"""Adam and AdamW as ``torch.optim`` computes them on the CPU, without ``torch.optim``'s machinery.

Per parameter theta with gradient g, at step k = 1, 2, ... (``torch.optim.Adam``/``AdamW``'s single-tensor path,
the one they take on the CPU, with the same tensor operations in the same order, so every step is the same to the
last bit; tests compare them):

    theta <- theta (1 - lr wd)                      (AdamW's decoupled weight decay wd; Adam here has none)
    m <- m + (1 - beta1) (g - m),   v <- beta2 v + (1 - beta2) g^2,
    theta <- theta - (lr / (1 - beta1^k)) m / (sqrt(v) / sqrt(1 - beta2^k) + eps)

Why not ``torch.optim``: constructing any of its optimisers imports ``torch._dynamo`` (1.4-2 CPU-s in every process
that does: a fifth of a short ``qkdyn lm`` run), and its ``step`` adds hooks and checks that cost more than the
update of small tensors. :class:`PlainAdamW` keeps ``torch.optim.AdamW``'s interface (``param_groups`` with their
``lr``, ``zero_grad``, ``step``, and a ``state_dict`` in its layout, so a checkpoint of either resumes in the other).
"""
from __future__ import annotations

import torch


def adam_update(param: torch.Tensor, grad: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor, step: float,
                lr: float, beta1: float, beta2: float, eps: float, weight_decay: float = 0.0) -> None:
    """Step ``step`` (the count after this one, >= 1) of the module docstring's update, in place: ``param``, its
    first and second moments ``exp_avg`` and ``exp_avg_sq``; ``weight_decay`` decoupled (AdamW's). Call it under
    ``torch.no_grad()``."""
    if weight_decay != 0:
        param.mul_(1 - lr * weight_decay)
    exp_avg.lerp_(grad, 1 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    denom = (exp_avg_sq.sqrt() / (1 - beta2**step) ** 0.5).add_(eps)
    param.addcdiv_(exp_avg, denom, value=-(lr / (1 - beta1**step)))


def zero_grad(param_groups: list[dict], set_to_none: bool = True) -> None:
    """A ``torch.optim`` optimiser's ``zero_grad`` over ``param_groups``: every gradient dropped (``set_to_none``,
    torch's default) or set to zeros in place."""
    for group in param_groups:
        for p in group["params"]:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()


#: the hyperparameters of a group of ``torch.optim.AdamW`` in its ``state_dict`` (those this class does not
#: implement at their only value here: no AMSGrad, no maximisation, the single-tensor path)
_GROUP_FLAGS = {"amsgrad": False, "maximize": False, "foreach": None, "capturable": False, "differentiable": False,
                "fused": False, "decoupled_weight_decay": True}


class PlainAdamW:
    """``torch.optim.AdamW(groups, lr, betas, eps, weight_decay)`` on the CPU (module docstring): a group's own
    ``lr`` and ``weight_decay`` where it gives them; a parameter without a gradient is left alone. The state of a
    parameter is ``{"step": float32 scalar tensor, "exp_avg", "exp_avg_sq"}``, as torch keeps it."""

    def __init__(self, groups: list[dict], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2):
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay}
        self.param_groups = [{**defaults, **group, **_GROUP_FLAGS, "params": list(group["params"])} for group in groups]
        self.state: dict[torch.Tensor, dict[str, torch.Tensor]] = {}

    def zero_grad(self, set_to_none: bool = True) -> None:
        zero_grad(self.param_groups, set_to_none)

    @torch.no_grad()
    def step(self) -> None:
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state.get(p)
                if state is None:
                    state = self.state[p] = {"step": torch.tensor(0.0), "exp_avg": torch.zeros_like(p),
                                             "exp_avg_sq": torch.zeros_like(p)}
                state["step"] += 1
                adam_update(p, p.grad, state["exp_avg"], state["exp_avg_sq"], state["step"].item(), group["lr"],
                            beta1, beta2, group["eps"], group["weight_decay"])

    def state_dict(self) -> dict:
        """``torch.optim.AdamW.state_dict()``'s layout: the state by parameter index, the groups with their indices."""
        index = {p: i for i, p in enumerate(p for group in self.param_groups for p in group["params"])}
        return {"state": {index[p]: dict(state) for p, state in self.state.items()},
                "param_groups": [{**{k: v for k, v in group.items() if k != "params"},
                                  "params": [index[p] for p in group["params"]]} for group in self.param_groups]}

    def load_state_dict(self, state_dict: dict) -> None:
        """Resume from :meth:`state_dict` or ``torch.optim.AdamW``'s (the same groups of the same parameters): each
        group's hyperparameters, each parameter's moments on its device and dtype, its step count. A state that does
        not fit (other groups, a parameter index out of range, moments not tensors of the parameter's shape) is a
        ValueError (a checkpoint's: "damaged", :meth:`qkdyn.runs.RunDir.restore`)."""
        saved = state_dict["param_groups"]
        if [len(group["params"]) for group in saved] != [len(group["params"]) for group in self.param_groups]:
            raise ValueError("the saved optimizer state has other parameter groups than this optimizer")
        params = [p for group in self.param_groups for p in group["params"]]
        restored = {}
        for i, state in state_dict["state"].items():
            if not (isinstance(i, int) and 0 <= i < len(params)):
                raise ValueError(f"the saved optimizer state names parameter {i!r} of {len(params)}")
            p, moments = params[i], (state["exp_avg"], state["exp_avg_sq"])
            if not all(isinstance(m, torch.Tensor) and m.shape == p.shape for m in moments):
                raise ValueError(f"the saved moments of parameter {i} are not tensors of its shape {tuple(p.shape)}")
            restored[p] = {"step": torch.tensor(float(state["step"])), "exp_avg": moments[0].to(p.device, p.dtype),
                           "exp_avg_sq": moments[1].to(p.device, p.dtype)}
        for group, old in zip(self.param_groups, saved, strict=True):
            group.update({k: v for k, v in old.items() if k in ("lr", "betas", "eps", "weight_decay")})
            group["betas"] = tuple(group["betas"])
        self.state = restored
