"""Per-circuit optimiser groups, schedules, exact resume, presets and the two CLI commands."""
import dataclasses
import json
import math
import subprocess
import sys

import numpy as np
import pytest
import torch
from qkdyn.empirical.circuits.models import Decoder, ModelConfig
from qkdyn.empirical.circuits.optim import build_optimizer, qk_multiplier, qk_parameter_names
from qkdyn.empirical.circuits.presets import PRESETS, resolve
from qkdyn.empirical.circuits.train import Run, train
from qkdyn.empirical.schedule import cosine_with_warmup
from repo_paths import FIXTURES

from qkdyn.claims import VERDICTS
from qkdyn.cli import main
from qkdyn.errors import InputError

FIX = FIXTURES / "circuits"
DATA = {"vader": FIX / "vader", "hatexplain": FIX / "hatexplain", "sva": FIX / "linzen_agr.tsv", "squad": FIX / "squad"}



def tiny(task="vader", **kw):
    return resolve(task, "tiny", {"data": str(DATA[task]), **kw})


def test_qk_group_holds_exactly_wq_wk_and_optionally_the_embedding():
    model = Decoder(ModelConfig(vocab_size=20, n_out=3, max_len=8, d_model=8, n_head=2, n_layer=2, d_mlp=0))
    names = qk_parameter_names(model, qk_embedding=False)
    assert sorted(names) == sorted(f"blocks.{l}.attn.{m}.{p}" for l in (0, 1) for m in "qk" for p in ("weight", "bias"))
    assert "tok_emb.weight" in qk_parameter_names(model, qk_embedding=True)


@pytest.mark.parametrize("optimizer", ["adamw", "sgd"])
def test_group_learning_rates_follow_multiplier_warmup_cosine_and_ramp(optimizer):
    model = Decoder(ModelConfig(vocab_size=20, n_out=2, max_len=8, d_model=8, n_head=2))
    opt, sched = build_optimizer(model, optimizer=optimizer, lr=0.1, weight_decay=0.0, momentum=0.9, qk_lr_mult=30,
                                 qk_ramp_steps=4, qk_embedding=False, warmup=2, total=10)
    for step in range(10):
        qk, rest = (g["lr"] for g in opt.param_groups)
        assert rest == pytest.approx(0.1 * cosine_with_warmup(step, 2, 10))
        assert qk == pytest.approx(rest * qk_multiplier(step, 30, 4))
        opt.step()
        sched.step()
    assert cosine_with_warmup(0, 2, 10) == 0.5 and cosine_with_warmup(2, 2, 10) == 1.0
    assert cosine_with_warmup(10, 2, 10) == pytest.approx(0.0, abs=1e-12)
    assert qk_multiplier(0, 30, 4) == 1.0 and qk_multiplier(2, 30, 4) == 15.5 and qk_multiplier(9, 30, 0) == 30


def test_models_shapes_attention_and_padding_invariance():
    torch.manual_seed(0)
    for cfg in (ModelConfig(vocab_size=30, n_out=3, max_len=10, d_model=8, n_head=2),
                ModelConfig(vocab_size=30, n_out=3, max_len=10, d_model=8, n_head=2, d_mlp=0),
                ModelConfig(vocab_size=30, n_out=0, max_len=10, d_model=8, n_head=2, n_layer=3, layernorm=True, head="lm")):
        model = Decoder(cfg)
        ids = torch.tensor([[5, 6, 7, 0, 0], [5, 6, 7, 8, 9]])
        out, atts = model(ids, torch.tensor([3, 5]))
        assert len(atts) == cfg.n_layer and atts[0].shape == (2, 2, 5, 5)
        assert torch.allclose(atts[0].sum(-1), torch.ones(2, 2, 5))
        assert torch.all(atts[0][0, :, :, 3:] == 0)  # no attention to padding
        assert torch.all(atts[0].triu(1) == 0)  # causal
        alone, _ = model(ids[:1, :3], torch.tensor([3]))
        assert torch.allclose(out[:1] if cfg.head == "classify" else out[:1, :3], alone, atol=1e-6)
        assert out.shape == ((2, 3) if cfg.head == "classify" else (2, 5, 30))


def test_resume_after_kill_reproduces_the_uninterrupted_run(tmp_path):
    cfg = tiny(max_steps=10, ckpt_every=3, eval_every=2, qk_lr_mult=30.0)
    full = train(cfg, tmp_path / "a", progress=False)
    assert train(cfg, tmp_path / "b", stop_after=7, progress=False) is None  # killed after step 7, ckpt at 6
    assert [json.loads(l)["step"] for l in (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()] == [2, 4, 6]
    resumed = train(cfg, tmp_path / "b", progress=False)
    a = torch.load(tmp_path / "a" / "checkpoint.pt", weights_only=True)
    b = torch.load(tmp_path / "b" / "checkpoint.pt", weights_only=True)
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), name
    assert (tmp_path / "a" / "metrics.jsonl").read_text() == (tmp_path / "b" / "metrics.jsonl").read_text()
    assert full.final == resumed.final and set(full.final) == {"dev", "test"}


def test_resume_refuses_a_checkpoint_of_another_configuration(tmp_path):
    from qkdyn.errors import InputError

    train(tiny(max_steps=2), tmp_path, progress=False)
    with pytest.raises(InputError):
        train(tiny(max_steps=2, lr=0.5), tmp_path, progress=False)


@pytest.mark.parametrize("preset", ["paper-hatexplain", "paper-hatexplain-faster", "paper-hatexplain-faster-mlp",
                                    "paper-hatexplain-4layer", "paper-hatexplain-4layer-faster", "paper-sva",
                                    "paper-sva-faster", "paper-squad", "paper-squad-faster", "paper-squad-qk20",
                                    "paper-squad-slow-rest", "cpu-vader"])
def test_presets_build_and_take_one_optimisation_step(preset):
    """The paper-scale recipes on fixture data (cpu-brown-sva: test_brown_task_trains); the MLP moves
    exactly where the preset trains it."""
    task = PRESETS[preset]["task"]
    cfg = resolve(task, preset, {"data": str(DATA[task]), "vocab_size": min(PRESETS[preset].get("vocab_size", 10000), 500)})
    run = Run(cfg)
    model_cfg = run.model.cfg
    assert (model_cfg.d_model, model_cfg.n_head, model_cfg.n_layer, model_cfg.d_mlp, model_cfg.layernorm,
            model_cfg.head_dim, model_cfg.residual) == (cfg.d_model, cfg.n_head, cfg.n_layer, cfg.d_mlp, cfg.layernorm,
                                                        cfg.head_dim, cfg.residual)
    batch = run.batch(0)
    logits, atts = run.model(batch["ids"], batch["lengths"])
    assert atts[0].shape[1] == cfg.n_head and len(atts) == cfg.n_layer
    before = {n: p.detach().clone() for n, p in run.model.named_parameters()}
    loss = run.loss(batch)
    loss.backward()
    run.opt.step()
    assert math.isfinite(loss.item())
    changed = {n for n, p in run.model.named_parameters() if not torch.equal(p, before[n])}
    assert any(".attn.q." in n for n in changed) and any(".attn.v." in n for n in changed)
    assert {n.split(".")[1] for n in changed if n.startswith("blocks.")} == {str(layer) for layer in range(cfg.n_layer)}
    if cfg.d_mlp > 0:
        assert any(".mlp." in n for n in changed) == ("mlp" not in cfg.frozen)
    ratio = run.opt.param_groups[0]["lr"] / run.opt.param_groups[1]["lr"]
    assert ratio == pytest.approx(cfg.qk_lr_mult)


#: the notebooks' QK parameter groups, by name (one-layer models: block 0)
NOTEBOOK_QK_GROUPS = {
    "paper-hatexplain-faster": {"tok_emb.weight", "blocks.0.attn.q.weight", "blocks.0.attn.k.weight"},
    "paper-hatexplain-4layer-faster": {"tok_emb.weight"} | {f"blocks.{l}.attn.{m}.weight" for l in range(4) for m in "qk"},
    "paper-sva-faster": {"tok_emb.weight", "pos_emb.weight", "blocks.0.attn.q.weight", "blocks.0.attn.k.weight",
                         "blocks.0.attn.q.bias", "blocks.0.attn.k.bias"},
    "paper-squad-faster": {f"blocks.{l}.attn.{m}.{p}" for l in range(6) for m in "qk" for p in ("weight", "bias")},
}


@pytest.mark.parametrize("preset", sorted(NOTEBOOK_QK_GROUPS))
def test_notebook_presets_have_their_qk_groups_and_arms(preset):
    task = PRESETS[preset]["task"]
    cfg = resolve(task, preset, {"data": str(DATA[task]), "vocab_size": 200})
    run = Run(cfg)
    named = {id(p): n for n, p in run.model.named_parameters()}
    groups = {g["name"]: {named[id(p)] for p in g["params"]} for g in run.opt.param_groups}
    assert groups["qk"] == NOTEBOOK_QK_GROUPS[preset]
    same = resolve(task, preset.removesuffix("-faster"), {"data": str(DATA[task]), "vocab_size": 200})
    assert same.qk_lr_mult == 1 and cfg.qk_lr_mult == {"hatexplain": 30, "sva": 100, "squad": 20}[task]
    assert same.n_layer == cfg.n_layer
    if task == "squad":  # the faster arm: 10x lower base rate, more epochs, embedding at 0.1x without decay
        assert (cfg.lr, cfg.epochs, same.lr, same.epochs) == (5e-5, 100, 5e-4, 70)
        emb = next(g for g in run.opt.param_groups if g["name"] == "emb")
        assert {named[id(p)] for p in emb["params"]} == {"tok_emb.weight"} and emb["weight_decay"] == 0
        assert emb["lr"] / run.opt.param_groups[1]["lr"] == pytest.approx(0.1)
    if task == "hatexplain":
        assert (cfg.weight_decay, same.weight_decay, cfg.head_dim) == (1e-3, 1e-4, 64)
        mlp = {n for n in named.values() if ".mlp." in n}
        trained = {named[id(p)] for g in run.opt.param_groups for p in g["params"]}
        assert mlp and (mlp <= trained) == (cfg.n_layer == 4)  # the 4-layer notebook's groups hold every MLP
    if task == "sva":
        assert not cfg.residual and cfg.head_dim == 64 and cfg.grad_clip == 0 and cfg.weight_decay == 1e-5


def test_no_residual_and_wide_heads():
    cfg = ModelConfig(vocab_size=20, n_out=3, max_len=8, d_model=8, n_head=2, n_layer=1, d_mlp=0, head_dim=16,
                      residual=False)
    model = Decoder(cfg)
    assert model.blocks[0].attn.q.weight.shape == (32, 8) and model.blocks[0].attn.o.weight.shape == (8, 32)
    ids, lengths = torch.randint(1, 20, (3, 8)), torch.tensor([8, 5, 3])
    x = model.tok_emb(ids) + model.pos_emb(torch.arange(8))[None]
    pad = torch.arange(8)[None, :] >= lengths[:, None]
    y, _ = model.blocks[0].attn(x, pad)
    out, _ = model.blocks[0](x, pad)
    assert torch.allclose(out, y)  # no residual: the block's output is the attention output alone
    with_residual = Decoder(ModelConfig(**{**cfg.__dict__, "residual": True}))
    with_residual.load_state_dict(model.state_dict())
    assert torch.allclose(with_residual.blocks[0](x, pad)[0], x + y)


def test_authors_metrics_beside_the_standard_ones():
    from qkdyn.empirical.circuits import evaluate

    cfg = tiny("hatexplain", metrics="authors")
    run = Run(cfg)
    out = run.evaluate(run.dev[:6], full=True)
    assert "ac_area" in out and "eraser" in out  # the standard definitions stay
    assert len(out["authors_dtap_percent"]) == 3 and sum(map(sum, out["authors_dtap_percent"])) == pytest.approx(100)
    seqs = [run.vocab.encode(e.tokens) for e in run.dev[:6]]
    rows = evaluate.authors_rows(run.model, seqs, cfg.max_len)
    ids = torch.zeros(1, cfg.max_len, dtype=torch.long)
    ids[0, : len(seqs[0])] = torch.tensor(seqs[0])
    with torch.no_grad():
        _, atts = run.model(ids, torch.tensor([len(seqs[0])]))
    assert np.allclose(rows[0], atts[0][0, 0, -1].numpy())  # layer 0, head 0, the last (padded) row
    assert "authors_dtap_percent" not in run.evaluate(run.dev[:6], full=False)
    with pytest.raises(InputError):
        tiny(metrics="theirs")


def test_bad_qk_params_is_a_user_error():
    from qkdyn.errors import InputError

    with pytest.raises(InputError, match="qk-params"):
        tiny(qk_params="q,embedding")


def test_brown_task_trains(tmp_path):
    from qkdyn.empirical.data import brown

    pkg = tmp_path / "unpacked" / "package"
    pkg.mkdir(parents=True)
    rows = (FIX.parents[2] / "empirical" / "circuits" / "brown_sva_handcheck.tsv").read_text().splitlines()[1:]
    for n, row in enumerate(rows * 3):
        (pkg / f"c{'abcdefghijklmnopqr'[n % 18]}{n:02d}").write_text("\t" + row.split("\t")[-1] + "\n")
    (tmp_path / "prep").mkdir()
    brown.prepare(tmp_path / "unpacked", tmp_path / "prep")
    cfg = resolve("brown-sva", "cpu-brown-sva", {"data": str(tmp_path / "prep"), "max_steps": 2})
    result = train(cfg, tmp_path / "run", progress=False)
    assert 0 <= result.final["test"]["attention_mass"] <= 1 and "comprehensiveness" in result.final["test"]


def test_qa_run_reports_squad_metrics(tmp_path):
    result = train(tiny("squad", max_steps=3, n_layer=2, layernorm=True, max_len=64, max_answer_len=3),
                   tmp_path, progress=False)
    test = result.final["test"]
    assert test["n"] == 8 and 0 <= test["exact_match"] <= test["f1"] + 1e-12 <= 1 + 1e-12
    assert set(test["attention_mass_by_method"]) == {"layer_average", "layer_maxpool", "rollout"}
    assert abs(sum(map(sum, test["dtap_percent"])) - 100) < 1e-6


def test_cli_train_and_user_errors(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train-circuits", "--task", "hatexplain", "--preset", "tiny", "--data", str(DATA["hatexplain"]),
                 "--qk-lr-mult", "30", "--qk-embedding", "--out", str(out), "--no-progress"]) == 0
    final = json.loads((out / "result.json").read_text())
    assert final["trainer"] == "circuits" and final["config"]["qk_lr_mult"] == 30 and final["config"]["qk_embedding"] is True
    assert (out / "checkpoint.pt").exists() and (out / "metrics.jsonl").read_text().count("\n") == 3
    assert main(["train-circuits", "--task", "hatexplain", "--out", str(tmp_path / "x")]) == 2  # needs --data
    assert main(["train-circuits", "--task", "vader", "--data", str(DATA["vader"]), "--lr", "-1"]) == 2
    assert main(["train-circuits", "--task", "vader", "--data", str(tmp_path / "missing")]) == 2
    assert main(["train-circuits", "--task", "vader", "--preset", "tiny", "--data", str(DATA["vader"]),
                 "--lr", "nan"]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 4


def test_cli_compare_writes_table_plots_and_verdict(tmp_path):
    out = tmp_path / "fig"
    assert main(["compare-circuits", "--task", "vader", "--preset", "tiny", "--data", str(DATA["vader"]),
                 "--mults", "30", "--seeds", "0,1", "--runs", str(tmp_path / "runs"), "--out", str(out),
                 "--no-progress", "--no-controls", "--budget", "quick"]) == 0
    payload = json.loads((out / "vader.json").read_text())
    assert payload["arms"] == ["same lr", "QK x30"] and payload["seeds"] == [0, 1]
    claims = json.loads((out / "report.json").read_text())["claims"]
    assert [c["id"] for c in claims] == ["vader QK x30 no sharpening"]  # vader is the negative control
    assert claims[0]["verdict"] in VERDICTS and set(claims[0]["stats"]) == {
        "attention mass (primary)", "attention mass with the read-out position"}
    assert claims[0]["stats"]["attention mass (primary)"]["n"] == 2  # paired over the two seeds
    assert payload["summary"]["QK x30"]["accuracy"]["n"] == 2
    assert [p["name"].split(":")[1].strip() for p in claims[0]["preconditions"]] == [
        "the same-lr arm attends at uniform (the negative control's regime)",
        "every compared run reached the target training loss"]
    text = (out / "report.md").read_text()
    assert "PROXY" in text and "REDUCED from the quick budget: no control arms" in text
    assert "uniform attention's mass" in text and "previous-token head's mass" in text  # the nulls beside
    assert "at most 50, within a cap of 6 steps (" in text and "4 of 4 runs reached it" in text  # the quick target
    assert "claim" in (out / "README-section.md").read_text()
    assert all((out / p).stat().st_size > 0 for p in payload["plots"])
    assert main(["compare-circuits", "--task", "vader", "--seeds", "a"]) == 2


def test_help_does_not_import_torch():
    code = "import sys; from qkdyn.cli import build_parser; build_parser(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


#: the notebooks' recipes as their cells set them (path, code-cell index in the .ipynb's cell list); each
#: preset must carry these values. HX = HateXplain Dataset/HateXplain_{Same_LR,Faster_QK_LR}_Final_Config,
#: SVA = SVA-Dataset/{Baseline,Faster}_SVA_Train+heatmap+Eval, SQ = Squad-Dataset/GPT2-Squad-QA_{Same,Faster}.
NOTEBOOK_RECIPES = {
    "hatexplain": {  # HX cell 60 (training loop, both notebooks); model cells 6-22; padding cell 40
        "d_model": 64, "n_head": 4, "head_dim": 64, "d_mlp": 256, "n_layer": 1, "residual": True,  # cells 17, 60
        "layernorm": False,  # cells 17, 22: ln1/ln2/ln_final commented out of forward
        "max_len": 128, "batch_size": 32,  # cell 40: pad_sequences(maxlen=128), DataLoader(batch_size=32)
        "optimizer": "adamw", "lr": 5e-5, "epochs": 30, "warmup_frac": 0.1,  # cell 60: get_cosine_..., total // 10
        "grad_clip": 1.0, "dropout": 0.0, "label_smoothing": 0.0, "accum_steps": 1, "schedule": "cosine",
        "seed": 1234,  # cell 60: train_seeds = [1234, ..., 1238]
    },
    "hatexplain-same": {"weight_decay": 1e-4, "qk_lr_mult": 1.0, "frozen": ""},  # Same cell 60: AdamW(model.parameters())
    "hatexplain-faster": {"weight_decay": 1e-3, "qk_lr_mult": 30.0, "qk_params": "q,k,tok_emb",
                          "frozen": "mlp"},  # Faster cell 60: 11 groups, no MLP group; b_Q, b_K, pos_embed at 1x
    # HateXplain_{Same_LR-4-Layers,Faster_QK_LR_Final_4-Layers}: the 1-layer cells but n_layers=4 (cell 60); the
    # faster arm's groups per block: W_Q, W_K 30x, b_Q, b_K, W_V, b_V, W_O, b_O 1x, block.mlp.parameters() 1x
    "hatexplain-4layer": {"n_layer": 4},
    "hatexplain-4layer-same": {"weight_decay": 1e-4, "qk_lr_mult": 1.0, "frozen": ""},
    "hatexplain-4layer-faster": {"weight_decay": 1e-3, "qk_lr_mult": 30.0, "qk_params": "q,k,tok_emb", "frozen": ""},
    "sva": {  # SVA cell 49 (training loop); block cell 12 (no residual, MLP commented out); cells 20, 33
        "d_model": 64, "n_head": 4, "head_dim": 64, "n_layer": 1, "d_mlp": 0, "residual": False,
        "max_len": 128, "batch_size": 32,  # cell 20 returnMask max_length = 128; cell 33 DataLoader(batch_size=32)
        "optimizer": "sgd", "momentum": 0.99, "lr": 5e-4, "weight_decay": 1e-5, "epochs": 15, "warmup_frac": 0.1,
        "grad_clip": 0.0,  # cell 49: no clip_grad_norm_
        "dropout": 0.0, "label_smoothing": 0.0, "accum_steps": 1, "schedule": "cosine", "seed": 1234,
        "qk_params": "q,k,q_bias,k_bias,tok_emb,pos_emb",  # Faster cell 49: these at 100x
    },
    "sva-same": {"qk_lr_mult": 1.0}, "sva-faster": {"qk_lr_mult": 100.0},
    "squad": {  # SQ Same cell 4 / Faster cell 4: the constants block, model, train_epoch; optimiser Same 4, Faster 5
        "d_model": 300, "n_head": 6, "n_layer": 6, "d_mlp": 1200, "layernorm": True, "max_len": 256,
        "max_answer_len": 50, "squad_window": 200, "dropout": 0.2, "batch_size": 32, "accum_steps": 2,
        "grad_clip": 0.5, "weight_decay": 0.05, "label_smoothing": 0.1, "optimizer": "adamw",
        "schedule": "onecycle", "schedule_span": 2.0,  # OneCycleLR(total_steps=len(loader) * NUM_EPOCHS), sched.step()
        # once per ACCUMULATION_STEPS batches
        "tie_embeddings": True, "init": "xavier",  # self.output.weight = self.token_embedding.weight; _init_weights
        "emb_lr_mult": 0.1,  # both arms: token embedding at BASE_LR * 0.1, weight_decay 0
        "seed": 1234,
    },
    # WARMUP_STEPS = 1000 of len(loader) x NUM_EPOCHS, len(loader) = 60000 / 32 (TRAIN_SUBSET_SIZE, BATCH_SIZE);
    # the same arm without GloVe: AdamW(model.parameters(), BASE_LR, weight_decay=WEIGHT_DECAY), one group
    "squad-same": {"lr": 5e-4, "epochs": 70, "qk_lr_mult": 1.0, "warmup_frac": 1000 / (1875 * 70), "emb_lr_mult": 1.0},
    "squad-faster": {"lr": 5e-5, "epochs": 100, "qk_lr_mult": 20.0, "warmup_frac": 1000 / (1875 * 100),
                     "qk_params": "q,k,q_bias,k_bias",  # 'q_linear' in n or 'k_linear' in n: weights and biases
                     "emb_lr_mult": 0.1},  # Faster cell 5: token embedding at BASE_LR * 0.1, weight_decay 0, always
}


@pytest.mark.parametrize("recipe", ["hatexplain", "hatexplain-4layer", "sva", "squad"])
def test_paper_presets_equal_the_notebook_cells(recipe):
    task = recipe.split("-")[0]
    for arm, preset in (("same", f"paper-{recipe}"), ("faster", f"paper-{recipe}-faster")):
        cfg = resolve(task, preset, {})
        expected = {**NOTEBOOK_RECIPES[task], **NOTEBOOK_RECIPES[recipe], **NOTEBOOK_RECIPES[f"{recipe}-{arm}"]}
        got = {field: getattr(cfg, field) for field in expected}
        assert got == pytest.approx(expected), preset
    assert NOTEBOOK_RECIPES["squad-same"]["warmup_frac"] == pytest.approx(0.0076, abs=1e-4)  # "about 0.8%"


def test_squad_arms_separate_faster_qk_from_slower_everything_else():
    """Peak rate of each part over the same arm's: the notebook's faster arm is QK x2 with every other
    rate /10 (the token embedding /100, without decay); qkdyn's arms split it into QK x20 alone and QK x2
    with every other rate /10, both at the same arm's length."""
    def rates(preset):
        cfg = resolve("squad", preset, {"data": str(DATA["squad"]), "vocab_size": 200, "n_layer": 1, "d_model": 12,
                                        "n_head": 2, "d_mlp": 8})
        run = Run(cfg)
        part = {id(p): n.split(".")[-2] if n.startswith("blocks.") else n for n, p in run.model.named_parameters()}
        return cfg, {part[id(p)]: g["max_lr"] for g in run.opt.param_groups for p in g["params"]}

    same_cfg, same = rates("paper-squad")
    assert len(set(same.values())) == 1  # one group without GloVe
    expected = {"paper-squad-faster": (2, 0.1, 0.01), "paper-squad-qk20": (20, 1, 1),
                "paper-squad-slow-rest": (2, 0.1, 0.1)}
    for preset, (qk, rest, emb) in expected.items():
        cfg, got = rates(preset)
        ratio = {part: got[part] / same[part] for part in got}
        expect = {part: qk if part in ("q", "k") else emb if part == "tok_emb.weight" else rest for part in ratio}
        assert ratio == pytest.approx(expect), preset
        assert (cfg.epochs == same_cfg.epochs) == (preset != "paper-squad-faster")


def test_frozen_mlp_stays_at_its_initialisation_and_both_readings_run():
    cfg = resolve("hatexplain", "paper-hatexplain-faster", {"data": str(DATA["hatexplain"]), "vocab_size": 200,
                                                            "max_steps": 3, "lr": 1e-2,
                                                            "batch_size": 4, "max_len": 32})
    for frozen, moves in (("mlp", False), ("", True)):
        run = Run(dataclasses.replace(cfg, frozen=frozen))
        mlp = {n: p.detach().clone() for n, p in run.model.named_parameters() if ".mlp." in n}
        in_groups = {id(p) for g in run.opt.param_groups for p in g["params"]}
        assert mlp and all((id(p) in in_groups) == moves for n, p in run.model.named_parameters() if n in mlp)
        for step in range(3):
            run.loss(run.batch(step)).backward()
            run.opt.step()
            run.opt.zero_grad()
        after = dict(run.model.named_parameters())
        assert all(torch.equal(after[n], p) != moves for n, p in mlp.items())
    with pytest.raises(InputError, match="frozen"):
        tiny(frozen="attention")


def test_accumulation_onecycle_half_cycle_and_label_smoothing(tmp_path):
    """Two batches per optimiser step; the cycle spans twice the steps taken, so the run ends near its
    middle (torch's annealing phase runs from step -1 to C - 1 without warm-up: 5/8 of it done after 4
    steps), not at its end (peak / 25e4)."""
    cfg = tiny(max_steps=8, eval_every=2, ckpt_every=2, accum_steps=2, schedule="onecycle", schedule_span=2.0,
               warmup_frac=0.0, label_smoothing=0.1, dropout=0.2)
    run = Run(cfg)
    assert run.sched.total_steps == 8  # 4 optimiser steps taken, a cycle of 8
    result = train(cfg, tmp_path, progress=False)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [2, 4, 6, 8]
    peak, low = cfg.lr, cfg.lr / 25 / 1e4
    assert rows[-1]["lr_rest"] == pytest.approx(low + (peak - low) * (1 + math.cos(math.pi * 5 / 8)) / 2)
    assert result.steps == 8 and result.details["target_reached"] is False
    with pytest.raises(InputError, match="accum"):
        tiny(accum_steps=3, eval_every=2)
    logits, labels = torch.tensor([[2.0, 0.0, -1.0]]), torch.tensor([0])
    from qkdyn.empirical.circuits.models import classification_loss

    logp = logits.log_softmax(-1)
    assert classification_loss(logits, labels, 0.1).item() == pytest.approx(
        -(0.9 * logp[0, 0] + 0.1 * logp[0].mean()).item(), rel=1e-6)


def test_tied_embeddings_and_xavier_init():
    cfg = ModelConfig(vocab_size=30, n_out=0, max_len=8, d_model=8, n_head=2, n_layer=2, layernorm=True, head="lm",
                      tie_embeddings=True, init="xavier", dropout=0.2)
    model = Decoder(cfg)
    assert model.out.weight is model.tok_emb.weight
    assert "out.weight" not in dict(model.named_parameters())
    bound = math.sqrt(6 / (8 + 8)) / math.sqrt(2)  # xavier-uniform, gain 1/sqrt 2, on an 8 x 8 matrix
    q = model.blocks[0].attn.q.weight
    assert q.abs().max() <= bound and q.abs().max() > 0.5 * bound
    model.eval()
    ids = torch.randint(1, 30, (2, 8))
    assert torch.equal(model(ids, torch.tensor([8, 8]))[0], model(ids, torch.tensor([8, 8]))[0])  # no dropout in eval


def test_target_loss_stops_at_matched_training_loss(tmp_path):
    cfg = tiny(max_steps=40, eval_every=2, ckpt_every=2, target_loss=50.0)  # any loss is below 50: stop at once
    result = train(cfg, tmp_path / "a", progress=False)
    assert result.details["target_reached"] and result.steps == 2 and result.details["final_train_loss"] <= 50
    again = train(cfg, tmp_path / "a", progress=False)  # resumed: stays stopped
    assert again.steps == 2
    never = train(dataclasses.replace(cfg, max_steps=4, target_loss=1e-9), tmp_path / "b", progress=False)
    assert not never.details["target_reached"] and never.steps == 4


def test_device_flag_cpu_dry_run(tmp_path):
    """The GPU path is the same code with --device cuda (bf16 autocast); here the CPU and auto resolve."""
    from qkdyn.empirical.circuits.train import resolve_device

    assert resolve_device("cpu").type == "cpu"
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    result = train(tiny(max_steps=2, device="auto" if not torch.cuda.is_available() else "cpu"), tmp_path,
                   progress=False)
    assert result.config["device"] in ("auto", "cpu")
    with pytest.raises(InputError):
        tiny(device="tpu")


def test_brown_qa_task_trains_and_reports_masses_beside_uniform(tmp_path):
    from qkdyn.empirical.data import brown_qa

    pkg = tmp_path / "unpacked" / "package"
    pkg.mkdir(parents=True)
    rows = (FIX.parents[2] / "empirical" / "circuits" / "brown_sva_handcheck.tsv").read_text().splitlines()[1:]
    for n in range(40):
        (pkg / f"c{'abcdefghijklmnopqr'[n % 18]}{n:02d}").write_text(
            "".join("\t" + rows[(n + k) % len(rows)].split("\t")[-1] + "\n" for k in range(3)))
    (tmp_path / "prep").mkdir()
    brown_qa.prepare(tmp_path / "unpacked", tmp_path / "prep")
    cfg = resolve("brown-qa", "cpu-brown-qa", {"data": str(tmp_path / "prep"), "max_steps": 3})
    test = train(cfg, tmp_path / "run", progress=False).final["test"]
    assert test["n"] > 0 and 0 <= test["exact_match"] <= test["f1"] + 1e-12 <= 1 + 1e-12
    assert set(test["uniform_mass_by_method"]) == set(test["attention_mass_by_method"]) == {
        "layer_average", "layer_maxpool", "rollout"}
    assert test["uniform_mass"] == test["uniform_mass_by_method"]["layer_average"]
    # rollout of uniform maps differs from |span| / (r + 1): the identity mixing moves mass to the read-out
    assert test["uniform_mass_by_method"]["rollout"] != test["uniform_mass"]


def test_uniform_rollout_mass_of_one_layer_is_half_the_uniform_mass():
    """One uniform causal map mixed half-half with the identity: the read-out row puts 0.5 / (r + 1) on every
    earlier position (and 0.5 + 0.5 / (r + 1) on itself); with two layers, the mass on position 0 of row
    r = 2 by hand: A' rows (1), (1/4, 3/4), (1/6, 1/6, 2/3), so (A'A')[2, 0] = 1/6 + 1/6 * 1/4 + 2/3 * 1/6 = 23/72."""
    from qkdyn.empirical.circuits.evaluate import uniform_mass, uniform_rollout_mass

    reads, spans = [4, 9], [((1, 2),), ((0,),)]
    assert uniform_rollout_mass(reads, spans, 1) == pytest.approx(0.5 * uniform_mass(reads, spans))
    assert uniform_rollout_mass([2], [((0,),)], 2) == pytest.approx(23 / 72)


def test_mean_mass_leaves_out_examples_without_a_rationale_but_not_nan_attention():
    """No rationale: left out of the mean; NaN attention (a diverged model) on an example that has
    one: the mean is NaN, never the mean of the examples that stayed finite; none: NaN, no warning."""
    import warnings

    from qkdyn.empirical.circuits.evaluate import mean_mass

    rationales = [((0, 1),), ((),), ((2,),)]
    assert mean_mass(np.array([0.25, np.nan, 0.75]), rationales) == pytest.approx(0.5)
    assert np.isnan(mean_mass(np.array([np.nan, np.nan, 0.75]), rationales))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.isnan(mean_mass(np.array([np.nan, np.nan]), [((),), ()]))


def test_qa_claims_judge_layer_average_and_rollout_beside_their_uniform_masses():
    from qkdyn.empirical.circuits import report

    def run(mass, rollout, f1, uniform_rollout=0.04):
        return {"final_train_loss": 0.5, "stopped_at": 100,
                "test": {"f1": f1, "exact_match": f1, "attention_mass": mass, "attention_mass_without_readout": mass,
                         "uniform_mass": 0.03, "uniform_mass_without_readout": 0.03,
                         "attention_mass_by_method": {"layer_average": mass, "rollout": rollout},
                         "uniform_mass_by_method": {"layer_average": 0.03, "rollout": uniform_rollout}}}

    same = [run(0.20 + d, 0.10 + d, 0.5 + d) for d in (0.0, 0.01, -0.01, 0.02, 0.005)]
    faster = [run(0.40 + d, 0.06 + d, 0.5 + d) for d in (0.0, 0.012, -0.008, 0.021, 0.004)]
    claims = report.claims("brown-qa", report.summarize({"same lr": same, "QK x30": faster}), "f1", 0.01, 1.0)
    (claim,) = claims
    assert list(claim.stats) == ["attention mass (primary)", "attention mass (rollout)", "f1"]
    assert claim.parts == {"sharper attention": "holds", "sharper attention (rollout)": "fails", "no f1 loss": "holds"}
    assert [p["name"].split(": ", 1)[1] for p in claim.preconditions] == [
        "the same-lr arm attends away from uniform", "the same-lr arm attends away from uniform (rollout)",
        "every compared run reached the target training loss"]
    # a baseline whose rollout mass is uniform's cannot be the baseline of a verdict
    flat = [run(0.20 + d, 0.04 + d / 10, 0.5 + d) for d in (0.0, 0.01, -0.01, 0.02, 0.005)]
    (gated,) = report.claims("brown-qa", report.summarize({"same lr": flat, "QK x30": faster}), "f1", 0.01, 1.0)
    assert set(gated.parts.values()) == {"inconclusive"} and not gated.preconditions[1]["met"]
