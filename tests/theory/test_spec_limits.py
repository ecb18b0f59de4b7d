"""Spec limits (theory/spec.py, docs/derivation.md section 6): every size and number beyond its limit is
refused by validation alone, in one line naming the field and the limit, before anything is derived;
the shipped and named specs still validate; specs at the limits derive in under a minute (a
representative subset: the flow of the heaviest ones, the whole ``qkdyn.derive`` of three cheaper ones)."""
import json
import math
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest
from qkdyn.theory.spec import MAX_COUNT_VECTORS, NAMED, from_dict, load

import qkdyn
from qkdyn.errors import InputError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "specs"
NAN, INF = float("nan"), float("inf")
WEIGHTS = {"token_weights": [1.0, 2.0], "context_distinct": 2}  # D = 2, m = 2: 3 count vectors

#: (record, field the error names, the limit it states)
BEYOND = [
    ({"qk": {"form": "factorized", "depth": 5}}, "qk.depth", "4"),
    ({"ov": {"form": "factorized", "inner": "class", "depth": 20}}, "ov.depth", "4"),
    ({"qk": {"form": "factorized", "rank": 65}}, "qk.rank", "64"),
    ({"qk": {"form": "coupled", "coupling": "mlp", "hidden": 65}}, "qk.hidden", "64"),
    ({"qk": {"form": "coupled", "coupling": "mlp", "hidden": 10**9}}, "qk.hidden", "64"),
    ({"qk": {"form": "coupled", "coupling": "mlp", "hidden": 1e9}}, "qk.hidden", "64"),
    ({"qk": {"form": "coupled", "steps": 5}}, "qk.steps", "4"),
    ({"qk": {"form": "coupled", "integrator": "leapfrog", "steps": 3}}, "qk.steps", "2 leapfrog"),
    ({"qk": {"form": "coupled", "steps": 50, "hidden": 16, "rank": 4}}, "qk.steps", "4"),
    ({"token_weights": [1.0] * 11, "context_distinct": 1}, "token_weights", "10"),
    ({"token_weights": [1.0], "context_distinct": 65}, "context_distinct", "64"),
    ({"token_weights": [1.0] * 3, "context_distinct": 8}, "context_distinct", "36"),
    ({"token_weights": [1.0] * 9, "context_distinct": 2}, "context_distinct", "36"),
    ({"token_weights": [1.0] * 3, "context_distinct": 1, "qk": "factorized"}, "token_weights", "2"),
    ({"token_weights": [1.0] * 2, "context_distinct": 3, "ov": {"form": "factorized", "inner": "class"}},
     "context_distinct", "3"),
    ({**WEIGHTS, "qk": {"form": "factorized", "depth": 4}}, "qk.depth", "3"),
    ({**WEIGHTS, "qk": {"form": "coupled", "steps": 3}}, "qk.steps", "2"),
    ({**WEIGHTS, "qk": {"form": "coupled", "integrator": "leapfrog", "steps": 2}}, "qk.steps", "1 leapfrog"),
    ({"qk": {"form": "factorized", "imbalance": 1e308}}, "qk.imbalance", "1000"),
    ({"qk": {"form": "factorized", "imbalance": 1e-4}}, "qk.imbalance", "0.001"),
    ({"ov": {"weight_decay": 11.0}}, "ov.weight_decay", "10"),
    ({"ov": {"weight_decay": 1e-20}}, "ov.weight_decay", "1e-12"),
    ({"ov": {"weight_decay": -1.0}}, "ov.weight_decay", "0 or"),
    ({"qk": {"form": "coupled", "dt": 2.0}}, "qk.dt", "1"),
    ({"qk": {"form": "coupled", "dt": 1e-300}}, "qk.dt", "0.0001"),
    ({"qk": {"form": "coupled", "coupling_init": 11.0}}, "qk.coupling_init", "10"),
    ({"token_weights": [1.0, 1e7], "context_distinct": 1}, "token_weights", "1e+06"),
    ({"token_weights": [1.0, 1e-7], "context_distinct": 1}, "token_weights", "1e-06"),
]
#: NaN and infinities in every number a spec has
NON_FINITE = [({"qk": {"form": "coupled", field: value}}, f"qk.{field}")
              for field in ("imbalance", "weight_decay", "dt", "coupling_init") for value in (NAN, INF, -INF)]
NON_FINITE += [({"token_weights": [1.0, value], "context_distinct": 1}, "token_weights") for value in (NAN, INF)]

#: one spec at each limit (accepted), the heaviest combinations first
AT_LIMIT = {
    "class_depth4_both_self": {"self_attention": True, "qk": {"form": "factorized", "inner": "class", "depth": 4},
                               "ov": {"form": "factorized", "inner": "class", "depth": 4}},
    "coupled_mlp_leapfrog2": {"self_attention": True, "qk": {"form": "coupled", "coupling": "mlp",
                                                             "integrator": "leapfrog", "steps": 2, "hidden": 64,
                                                             "rank": 64, "learn_dt": True, "dt": 1.0,
                                                             "coupling_init": 10.0},
                              "ov": {"form": "factorized", "inner": "class", "depth": 4}},
    "coupled_mlp_euler4": {"qk": {"form": "coupled", "coupling": "mlp", "steps": 4, "hidden": 64, "rank": 64}},
    "authors_weights_self": {"self_attention": True, "token_weights": [0.1 * i for i in range(1, 11)],
                             "context_distinct": 1},
    "weights_36_vectors": {"token_weights": [1.0] * 8, "context_distinct": 2},
    "weights_class_depth3_self": {**WEIGHTS, "self_attention": True,
                                  "qk": {"form": "factorized", "inner": "class", "depth": 3},
                                  "ov": {"form": "factorized", "inner": "class", "depth": 3}},
    "weights_coupled_leapfrog1": {**WEIGHTS, "self_attention": True,
                                  "qk": {"form": "coupled", "integrator": "leapfrog", "learn_dt": True},
                                  "ov": {"form": "factorized", "inner": "class", "depth": 3}},
    "rank64_depth4": {"qk": {"form": "factorized", "rank": 64, "depth": 4}},
    "numbers_at_range_ends": {"qk": {"form": "factorized", "rank": 64, "imbalance": 1e3, "weight_decay": 10.0},
                              "ov": {"form": "factorized", "inner": "class", "imbalance": 1e-3,
                                     "weight_decay": 1e-12}},
    "weights_one_token_m64": {"token_weights": [1e6], "context_distinct": 64},
}


def _refused(record) -> tuple[InputError, float]:
    start = time.perf_counter()
    with pytest.raises(InputError) as err:
        from_dict({"name": "beyond", **record})
    return err.value, time.perf_counter() - start


@pytest.mark.parametrize("record, field, limit", BEYOND, ids=lambda v: None if isinstance(v, dict) else str(v))
def test_beyond_a_limit_is_one_line_naming_the_field_and_the_limit(record, field, limit):
    error, seconds = _refused(record)
    message = str(error)
    assert error.field == field and limit in error.problem and "\n" not in message, message
    assert seconds < 1.0


@pytest.mark.parametrize("record, field", NON_FINITE, ids=lambda v: None if isinstance(v, dict) else str(v))
def test_nan_and_infinities_are_refused(record, field):
    error, seconds = _refused(record)
    assert error.field == field and "finite number" in error.problem and seconds < 1.0


def test_files_beyond_the_limits_are_refused_in_one_line(tmp_path):
    """Through :func:`load` (the command line's path): the finding's specs, NaN as JSON writes it, and an
    integer too long for Python to convert (a parse error, not a traceback)."""
    cases = {"depth20.json": ('{"qk": {"form": "factorized", "depth": 20}}', "qk.depth"),
             "steps.json": ('{"qk": {"form": "coupled", "steps": 50, "hidden": 16, "rank": 4}}', "qk.steps"),
             "imbalance.toml": ('[qk]\nform = "factorized"\nimbalance = 1e308\n', "qk.imbalance"),
             "hidden.toml": ('[qk]\nform = "coupled"\ncoupling = "mlp"\nhidden = 1_000_000_000\n', "qk.hidden"),
             "nan.json": ('{"qk": {"form": "coupled", "dt": NaN}}', "qk.dt"),
             "digits.json": ('{"qk": {"rank": 1' + "0" * 5000 + "}}", "not valid JSON"),
             "digits.toml": ("[qk]\nrank = 1" + "0" * 5000 + "\n", "not valid TOML")}
    for name, (text, expected) in cases.items():
        (tmp_path / name).write_text(text)
        start = time.perf_counter()
        with pytest.raises(InputError) as err:
            load(tmp_path / name)
        assert expected in str(err.value) and "\n" not in str(err.value), str(err.value)
        assert time.perf_counter() - start < 1.0


def test_the_shipped_and_named_specs_validate():
    for path in sorted(EXAMPLES.glob("*.*")):
        assert load(path).name == path.stem
    for spec in NAMED.values():
        assert from_dict(json.loads(json.dumps({"name": spec.name, "qk": vars(spec.qk), "ov": vars(spec.ov)}))) == spec
    assert len(qkdyn.Spec("authors", token_weights=[0.1 * i for i in range(1, 11)], context_distinct=1).token_weights) == 10


@pytest.mark.parametrize("name", list(AT_LIMIT))
def test_a_spec_at_the_limits_validates(name):
    assert from_dict({"name": name, **AT_LIMIT[name]}).name == name


def test_count_vectors_limit_is_the_multinomial_count():
    """36 count vectors: D = 8, m = 2 (accepted above); D = 3, m = 7 is C(9, 7) = 36 too."""
    assert math.comb(8 + 2 - 1, 2) == math.comb(3 + 7 - 1, 7) == MAX_COUNT_VECTORS
    assert from_dict({"token_weights": [1.0, 2.0, 3.0], "context_distinct": 7}).context_distinct == 7


_FLOWS = """
import json, resource, sys, time
from qkdyn.theory.spec import from_dict
from qkdyn.theory import specflow, specnumeric
for name, record in json.loads(sys.argv[1]).items():
    start = time.process_time()
    spec = from_dict({"name": name, **record})
    specflow.derive_spec(spec)
    specnumeric.numeric(spec)
    print(name, time.process_time() - start, flush=True)
print("maxrss_kib", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def _limit_memory():
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))


@pytest.mark.slow
def test_flows_at_the_limits_derive_within_a_minute_and_2_gib():
    """The flow (``derive_spec`` and its numeric functions: what ``qkdyn solve`` needs) of every spec of
    :data:`AT_LIMIT`, in a fresh process capped at 4 GiB: each under a minute of CPU (the wall time on an idle
    machine; this one is shared), the process under 2 GiB. (Their whole ``qkdyn derive`` is measured in
    docs/derivation.md: up to about a minute each, too slow for the suite.)"""
    done = subprocess.run([sys.executable, "-c", _FLOWS, json.dumps(AT_LIMIT)], capture_output=True, text=True,
                          timeout=300, preexec_fn=_limit_memory, check=True)
    rows = dict(line.split() for line in done.stdout.splitlines())
    assert set(rows) == set(AT_LIMIT) | {"maxrss_kib"}
    assert all(float(rows[name]) < 60 for name in AT_LIMIT), rows
    assert int(rows["maxrss_kib"]) < 2 << 20, rows


@pytest.mark.parametrize("name", ["numbers_at_range_ends", "weights_one_token_m64", "rank64_depth4"])
def test_the_whole_derivation_at_a_limit_within_a_minute(name):
    """``qkdyn.derive`` (flow, conserved polynomials, rates, closed-form statements) of specs at limits
    (numbers at the ends of their ranges, m, rank and depth), under a minute of CPU."""
    start = time.process_time()
    derived = qkdyn.derive(from_dict({"name": name, **AT_LIMIT[name]}))
    assert derived.variables and time.process_time() - start < 60
