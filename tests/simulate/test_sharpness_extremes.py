"""Every legal input solved (issue 21): negative starts of factorized circuits, initial attention from
1e-300 to 1 - 1e-16, rho from 1e-12 to 1e12, levels down to the smallest double, against an
independent mpmath reference (tests/mp_reference.py); unreachable levels and times beyond the largest
double are one line and exit 2."""
import csv
import math

import mpmath as mp
import numpy as np
import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st
from mp_reference import reference
from qkdyn.simulate.sharpness import reachable_losses, sharpness
from qkdyn.simulate.solve import solve
from qkdyn.theory.compiled import load
from qkdyn.theory.setting import ALL_PARAMS, Setting

from qkdyn.cli import main
from qkdyn.errors import InputError

DOUBLE_MAX = np.finfo(float).max


def assert_matches(result, ref, *, time=True, t_rel=1e-10, qk_abs=0.0):
    """attn to 1e-11 relative and its complement (1 - attn) to 1e-9 relative (1e-15 absolute: a double
    attn near 1 holds no more); qk and ov to 1e-11 relative (absolute near 0); t to ``t_rel``. ``qk_abs``: the
    round-off of qk that the doubles allow (:func:`line_roundoff`), and what it moves attn by."""
    attn, ref_attn = float(result.attn), float(ref["attn"])
    assert attn == pytest.approx(ref_attn, rel=max(1e-11, (1 - ref_attn) * qk_abs), abs=1e-300)
    assert 1 - attn == pytest.approx(float(1 - ref["attn"]), rel=max(1e-9, ref_attn * qk_abs), abs=1e-15)
    assert float(result.qk) == pytest.approx(float(ref["qk"]), rel=1e-11, abs=max(1e-11, qk_abs))
    assert float(result.ov) == pytest.approx(float(ref["ov"]), rel=1e-11, abs=1e-11)
    if time:
        assert float(result.t) == pytest.approx(float(ref["t"]), rel=t_rel)


def cli(tmp_path, capsys, *argv):
    """(exit code, stderr, rows) of one ``qkdyn sharpness`` call."""
    out = tmp_path / "s.csv"
    code = main(["sharpness", *argv, "--out", str(out)])
    err = capsys.readouterr().err
    rows = list(csv.DictReader(out.open())) if out.exists() else None
    return code, err, rows


def one_line_exit_2(code, err, rows, *words):
    assert code == 2 and rows is None, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    for word in words:
        assert word in err


# -- the commands of issue 21, each a regression test ------------------------------------------------

def test_faco_below_even_attention_is_solved(tmp_path, capsys):
    """--param FACO --attn0 0.1 (qk0 < 0: a traceback before): the state and time against mpmath (the time
    in qk, through qk = 0 where 1/M_QK is near-singular), and the time against solve."""
    code, err, rows = cli(tmp_path, capsys, "--param", "FACO", "--attn0", "0.1", "--rho", "1", "--loss", "0.1")
    assert code == 0, err
    setting = Setting(attn0=0.1)
    result = sharpness(setting, "FACO", 1.0, 0.1)
    assert_matches(result, reference(setting, "FACO", 1.0, 0.1))
    assert float(rows[0]["attn"]) == float(result.attn) and float(rows[0]["t"]) == float(result.t)
    tr = solve(setting.replace(eta_qk=1.0), "FACO", until_loss=0.1, points=2)
    assert float(result.t) == pytest.approx(tr.event_t, rel=1e-8)


def test_cafo_below_zero_levels_below_log_k_are_unreachable(tmp_path, capsys):
    """--param CAFO --ov0 -0.1 (a traceback before): the factors shrink to the saddle at 0, so the loss
    tends to log K and 0.1 is never reached (one line, exit 2); a level above log K is solved."""
    code, err, rows = cli(tmp_path, capsys, "--param", "CAFO", "--ov0", "-0.1", "--rho", "1", "--loss", "0.1")
    one_line_exit_2(code, err, rows, "--loss", "log K", "saddle")
    setting = Setting(ov0=-0.1)
    floor, loss0 = reachable_losses(setting, "CAFO")
    assert floor == pytest.approx(math.log(4)) and loss0 > floor
    level = 0.5 * (floor + loss0)
    assert_matches(sharpness(setting, "CAFO", 1.0, level), reference(setting, "CAFO", 1.0, level))


def test_tiny_initial_attention_converges(tmp_path, capsys):
    """--attn0 1e-100 ("did not converge" before): a plateau of t ~ 1e101, against mpmath."""
    code, err, rows = cli(tmp_path, capsys, "--param", "CACO", "--attn0", "1e-100", "--rho", "1", "--loss", "0.1")
    assert code == 0, err
    setting = Setting(attn0=1e-100)
    result = sharpness(setting, "CACO", 1.0, 0.1)
    assert_matches(result, reference(setting, "CACO", 1.0, 0.1))
    assert 1e100 < float(result.t) < 1e103


def test_negative_margin_at_large_rho_converges(tmp_path, capsys):
    """--ov0 -2 --qk0 0.5 --rho 30 ("did not converge" before): qk falls to about -225 while ov < 0."""
    code, err, rows = cli(tmp_path, capsys, "--param", "CACO", "--ov0", "-2", "--qk0", "0.5", "--rho", "30",
                          "--loss", "0.1")
    assert code == 0, err
    setting = Setting(ov0=-2.0, qk0=0.5)
    assert_matches(sharpness(setting, "CACO", 30.0, 0.1), reference(setting, "CACO", 30.0, 0.1))


def test_faco_negative_margin_does_not_hang(tmp_path, capsys):
    """--param FACO --ov0 -0.5 --rho 10 (a hang before): qk falls below -1e13 on the way, so the time is
    beyond the largest double (one line, exit 2, at once); the state (--no-time) is finite and exact."""
    flags = ["--param", "FACO", "--ov0", "-0.5", "--rho", "10", "--loss", "0.1"]
    one_line_exit_2(*cli(tmp_path, capsys, *flags), "largest double", "--no-time")
    code, err, rows = cli(tmp_path, capsys, *flags, "--no-time")
    assert code == 0, err
    setting = Setting(ov0=-0.5)
    result = sharpness(setting, "FACO", 10.0, 0.1, time=False)
    ref = reference(setting, "FACO", 10.0, 0.1)
    assert ref["t"] > DOUBLE_MAX  # the time through its turn at ov = 0 is at least e^(4.0e7): beyond a double
    assert_matches(result, ref, time=False)
    assert float(rows[0]["attn"]) == float(result.attn)


def test_faco_negative_margin_with_a_finite_time():
    """A factorized QK circuit whose qk falls (ov0 < 0) and turns at ov = 0, then rises: the time against
    mpmath (in v, qk = qk_min + v^2, across the turn)."""
    setting = Setting(ov0=-0.5, qk0=0.2)
    assert_matches(sharpness(setting, "FACO", 3.0, 0.01), reference(setting, "FACO", 3.0, 0.01))


def test_smallest_levels(tmp_path, capsys):
    """--loss 1e-307 (t = inf with exit 0 before): beyond the largest double at eta_OV = 1, one line and
    exit 2; at eta_OV = 1e20 the time is finite, also for the smallest subnormal level, 5e-324."""
    one_line_exit_2(*cli(tmp_path, capsys, "--param", "CACO", "--rho", "1", "--loss", "1e-307"), "largest double")
    for level in (1e-307, 5e-324):
        setting = Setting(eta_ov=1e20)
        result = sharpness(setting, "CACO", 1.0, level)
        assert np.isfinite(result.t)
        assert_matches(result, reference(setting, "CACO", 1.0, level))


def test_root_from_a_far_bracket_end_is_not_stopped_early():
    """A hypothesis draw (CACO, attn0 9e-5, level 5e-324, z* = 746): the matched-loss root starts at its
    bracket's upper end, 8e6, and the first Newton step lands 1.5e-8 from the root; that one step's
    quadratic-convergence estimate (K = d_1 / d_0^2 = 3e-15, the root's own K being 4e-7) stopped it there,
    ov 2e-11 off. The state against mpmath to 1e-11."""
    setting = Setting(classes=7, distinct=9, commons=25, m=1, n=1, scale=1.9732064474584001,
                      ov0=0.053541988307438566, attn0=8.852557577216266e-05)
    rho, level = 0.0011352303381079358, 5e-324
    assert_matches(sharpness(setting, "CACO", rho, level, time=False), reference(setting, "CACO", rho, level),
                   time=False)


def test_solve_accepts_negative_starts_of_factorized_circuits():
    """Balanced factors carry the sign (W_Q = sign(qk0) sqrt(sigma) e_q): solve and sharpness agree."""
    for param, setting in (("FACO", Setting(attn0=0.1)), ("FAFO", Setting(qk0=-0.7, ov0=0.3)),
                           ("CAFO", Setting(ov0=-0.1, qk0=0.3))):
        floor, loss0 = reachable_losses(setting, param)
        level = floor + 0.3 * (loss0 - floor)
        tr = solve(setting.replace(eta_qk=2.0), param, until_loss=level, points=2)
        compiled, p = load(param), setting.replace(eta_qk=2.0).numeric()
        qk, ov = compiled.features(tr.state[:, 0], p)
        assert float(qk) == pytest.approx(setting.qk0, rel=1e-14) and float(ov) == pytest.approx(setting.ov0, rel=1e-14)
        result = sharpness(setting, param, 2.0, level)
        assert float(result.attn) == pytest.approx(float(compiled.attention(compiled.features(tr.state[:, -1], p)[0], p)),
                                                   abs=1e-9)
        assert float(result.t) == pytest.approx(tr.event_t, rel=1e-7)
        if param == "FAFO":  # negative balanced factors of QK (FACO at qk0 < 0: the regression test above)
            assert_matches(result, reference(setting, param, 2.0, level))


# -- frozen attention (rho = 0) from the tiniest attentions -------------------------------------------

def frozen_time(setting, param, level):
    """t to ``level`` at rho = 0 by the frozen-attention laws (theory/frozen.py), at 40 digits: alpha =
    m e^qk0 / (m e^qk0 + n) stays fixed, and in z = alpha ov (z0 = alpha ov0, z the level's)
    collapsed OV (D = b for the paper's form): t = D (e^z - e^z0 + (K-1) (z - z0)) / (eta_OV alpha^2);
    factorized OV: t = sqrt(D) ((K-1) log(z / z0) + Ei(z) - Ei(z0)) / (2 eta_OV alpha). inf beyond a double."""
    with mp.workdps(40):
        gap = setting.m * mp.exp(mp.mpf(setting.qk0))
        alpha, k1 = gap / (gap + setting.n), setting.classes - 1
        z, z0 = mp.log(k1) - mp.log(mp.expm1(mp.mpf(level))), alpha * setting.ov0
        d = setting.b if param == "paper" else setting.distinct
        if param in ("CAFO", "FAFO"):
            return float(mp.sqrt(d) * (k1 * mp.log(z / z0) + mp.ei(z) - mp.ei(z0)) / (2 * setting.eta_ov * alpha))
        return float(d * (mp.exp(z) - mp.exp(z0) + k1 * (z - z0)) / (setting.eta_ov * alpha**2))


@pytest.mark.parametrize("param", ALL_PARAMS)
def test_frozen_attention_from_attention_1e_200(param):
    """Setting(attn0=1e-200) at rho = 0, level 1e-3 ("line inversion did not converge" before for CACO and paper;
    FACO's qk 0.33 off qk0 without the time, a traceback with it): the root lies at ov* = z* / attn0 = 8e200, where
    a collapsed OV circuit's Psi(ov) - Psi(ov0) exceeds the doubles, and the line's rho times it was 0 inf = NaN.
    Attention stays frozen: qk = qk0 and the state against mpmath; the time by the frozen law, beyond the largest
    double for a collapsed OV circuit (3e404: one line, the state without the time), 3.7e203 for a factorized one."""
    setting = Setting(attn0=1e-200)
    t = frozen_time(setting, param, 1e-3)
    if param in ("CAFO", "FAFO"):
        result = sharpness(setting, param, 0.0, 1e-3)
        assert float(result.t) == pytest.approx(t, rel=1e-10)
    else:
        assert t > DOUBLE_MAX
        with pytest.raises(InputError, match="largest double"):
            sharpness(setting, param, 0.0, 1e-3)
        result = sharpness(setting, param, 0.0, 1e-3, time=False)
    assert float(result.qk) == pytest.approx(setting.qk0, rel=1e-15)
    assert_matches(result, reference(setting, param, 0.0, 1e-3, time=False), time=False)


def test_frozen_attention_from_attention_1e_200_on_the_command_line(tmp_path, capsys):
    """The reported command: one line and exit 2 (the time is beyond the largest double); --no-time gives the
    state, qk = qk0."""
    flags = ["--param", "CACO", "--attn0", "1e-200", "--rho", "0", "--loss", "1e-3"]
    one_line_exit_2(*cli(tmp_path, capsys, *flags), "largest double", "--no-time")
    code, err, rows = cli(tmp_path, capsys, *flags, "--no-time")
    assert code == 0, err
    assert float(rows[0]["qk"]) == Setting(attn0=1e-200).qk0
    assert float(rows[0]["attn"]) == pytest.approx(1e-200, rel=1e-12)


@pytest.mark.parametrize("param", ["CACO", "FACO", "paper"])
def test_frozen_attention_time_where_a_panel_exceeds_the_doubles(param):
    """attn0 = 1e-200, eta_OV = 1e100, rho = 0: t = 3e304 (the frozen law) is finite, but a quadrature panel's
    integral before the 1/eta_OV, half its width (~1e200 in ov) times the weighted sum of dt/dov at its nodes
    (1/alpha = 1e200 times 1/M_OV = D (K-1)), is not; it was formed in doubles (every value below 1e290), so the time
    read as beyond the largest double: an InputError for a finite time. In logs there: to 1e-10."""
    setting = Setting(attn0=1e-200, eta_ov=1e100)
    t = frozen_time(setting, param, 1e-3)
    assert 1e300 < t < DOUBLE_MAX
    assert float(sharpness(setting, param, 0.0, 1e-3).t) == pytest.approx(t, rel=1e-10)


@settings(max_examples=40)
@given(param=st.sampled_from(ALL_PARAMS), log_attn0=st.floats(-300, -5), rho=st.sampled_from([0.0, 1e-3, 1.0, 50.0]),
       log_level=st.floats(-12, math.log10(0.5)), log_eta_ov=st.sampled_from([0.0, 0.0, 100.0, 300.0]))
def test_tiny_attention_is_solved_or_its_time_refused_in_one_line(param, log_attn0, rho, log_level, log_eta_ov):
    """The neighbourhood of the cases above (attention 1e-300 .. 1e-5, rho 0 .. 50, levels 1e-12 .. 0.5, eta_OV
    up to 1e300, every form): a finite state on the level set (qk = qk0 at rho = 0), and a finite time or one line
    saying it is beyond the largest double; at rho = 0 the frozen law says which, and the time to 1e-10."""
    setting, level = Setting(attn0=10.0**log_attn0, eta_ov=10.0**log_eta_ov), 10.0**log_level
    frozen = frozen_time(setting, param, level) if rho == 0 else None
    try:
        result = sharpness(setting, param, rho, level)
    except InputError as error:
        assert "largest double" in str(error) and "\n" not in str(error)
        assert frozen is None or frozen > DOUBLE_MAX
        result = sharpness(setting, param, rho, level, time=False)
    else:
        assert 0 < float(result.t) < math.inf
        assert frozen is None or float(result.t) == pytest.approx(frozen, rel=1e-10)
    compiled, p = load(param), setting.numeric()
    qk, ov = float(result.qk), float(result.ov)
    assert math.isfinite(qk) and math.isfinite(ov)
    assert float(compiled.loss(qk, ov, p)) == pytest.approx(level, rel=1e-9)
    assert float(result.attn) == float(compiled.attention(qk, p))
    if rho == 0:
        assert qk == pytest.approx(setting.qk0, rel=1e-15)


# -- hypothesis over the whole legal range ------------------------------------------------------------

def logit_uniform(lo, hi):
    """attn0 with logit(attn0) uniform: covers 1e-300 .. 1 - 1e-16 evenly in log odds."""
    return st.floats(math.log(lo) - math.log1p(-lo), math.log(hi) - math.log1p(-hi)).map(lambda x: 1 / (1 + math.exp(-x)))


def extreme_settings(draw, param):
    setting = Setting(classes=draw(st.integers(2, 8)), distinct=draw(st.integers(1, 20)),
                      commons=draw(st.integers(1, 40)), m=draw(st.integers(1, 20)), n=draw(st.integers(1, 40)),
                      scale=draw(st.floats(0.3, 2.0)), eta_ov=10 ** draw(st.floats(-1, 12)),
                      ov0=draw(st.floats(-2.0, 2.0).filter(lambda v: abs(v) > 1e-3)),
                      attn0=draw(logit_uniform(1e-300, 1 - 1e-16)))
    assume(not (param[0] == "F" and setting.qk0 == 0))
    return setting


@st.composite
def problems(draw, param):
    setting = extreme_settings(draw, param)
    rho = 10 ** draw(st.floats(-12, 12))
    floor, loss0 = reachable_losses(setting, param)
    fraction = draw(st.floats(0.0, 1.0))
    if floor > 0:
        level = floor + (loss0 - floor) * min(max(fraction, 1e-6), 1 - 1e-6)
    else:  # log-uniform down to the smallest subnormal
        level = math.exp(math.log(5e-324) + fraction * (math.log(loss0) - math.log(5e-324))) * (1 - 1e-9)
    assume(floor < level < loss0)
    return setting, rho, level


def line_roundoff(setting, param, rho, ref) -> float:
    """eps |lam| / Phi'(qk*), lam = rho (Psi(ov*) - Psi(ov0)) = Phi(qk*) - Phi(qk0): where lam dwarfs Phi(qk*)'s own
    scale (a large rho from a large qk0, ov0 < 0: Phi(qk0) ~ 3.5e6, the state at Phi ~ 1) the line is a
    cancellation whose doubles (lam, and the table's Phi, each rounded to eps |lam|) hold qk* only to this; qkdyn
    is within 0.07-0.17 of it on four such draws (FAFO, rho 2e8-6.5e8, qk0 15-19)."""
    from mp_reference import Reference

    line = Reference(setting, param, rho)
    lam = line.rho * (line.psi(ref["ov"]) - line.psi(line.ov0))
    return float(mp.mpf(2.0**-52) * abs(lam) / line.dphi(ref["qk"]))


def check_against_reference(param, setting, rho, level, time):
    ref = reference(setting, param, rho, level, time=time)
    if time and ref["t"] > DOUBLE_MAX:
        with pytest.raises(InputError, match="largest double"):
            sharpness(setting, param, rho, level)
        time = False
    # t to 1e-8 over the whole range: the worst seen in the extreme corners (attention 1e-170, levels 1e-170,
    # rho 1e10) is 3.4e-9; at ordinary settings it is ~1e-11 (the regression tests above assert 1e-10)
    assert_matches(sharpness(setting, param, rho, level, time=time), ref, time=time, t_rel=1e-8,
                   qk_abs=line_roundoff(setting, param, rho, ref))


@pytest.mark.parametrize("param", ["CACO", "CAFO", "paper"])
@settings(max_examples=3)
@given(data=st.data())
def test_collapsed_qk_state_and_time_match_mpmath_everywhere(param, data):
    setting, rho, level = data.draw(problems(param))
    check_against_reference(param, setting, rho, level, time=True)


@settings(max_examples=4)
@given(case=st.sampled_from(["FACO", "FAFO"]).flatmap(lambda param: problems(param).map(lambda p: (param, *p))))
# a draw whose qk turns at -6.6e1679 (Phi grows like asinh(qk / w)): the reference's quadrature in v could not
# resolve qk = qk_min + v^2 ("Phi misses the far end"); its lower bound of t, e^(3.3e1679), is beyond a double,
# and qkdyn says so (InputError) and gives the state without the time
@example(case=("FACO", Setting(qk0=-674.0, ov0=-1.88), 103.0, 1.2e-273))
# a draw (rounded) where qk moves by 3e-4 while ov grows to 769 (rho 7e-7): Phi summed from cached points, 1/M_QK
# included, was not monotone to the 1e-33 relative that the reference's root check needs at 40 digits ("did not
# converge"); with the 1/M_QK part in closed form from qk0 it gives qkdyn's qk 1.70501761, ov 769.238, t 4.96e164
@example(case=("FAFO", Setting(classes=2, distinct=3, commons=22, m=6, n=33, scale=0.848, eta_ov=1.046, qk0=1.7047,
                               ov0=1.2017), 7.12e-7, 8.7e-168))
# a draw ending at ov = -9e-7 from ov0 = -0.81 (qk0 36): the reference's check of its quadrature, made on ov, read
# Phi's 4e-28 relative error magnified 1e12 by Psi^-1 near ov = 0 ("Phi misses the far end"); it checks Phi now
@example(case=("FAFO", Setting(classes=3, distinct=16, commons=21, m=12, n=15, scale=1.8388591191042594,
                               qk0=36.26679694043136, ov0=-0.81043497719794), 5.907554953172778e-09, 1.098612894398736))
# a draw at large rho from ov0 < 0 (qkdyn: ov moves by 4e-9 relative, qk -0.481): the reference's root finder probed
# ov = ov0 / 2, where the line puts qk near -e^(1e8): stepping down to it in qk never ended, nor did mpmath's e^-qk
# there; it finds qk in u = asinh(qk / w) now and takes alpha as 0 below qk = -10^10000
@example(case=("FAFO", Setting(classes=8, distinct=3, commons=24, m=6, n=20, scale=0.7276916059114416,
                               eta_ov=57.39109865973869, qk0=-0.015372997470812777, ov0=-1.8869538159141095),
               113136219.5292113, 2.342147809669671))
# a draw from qk0 19.1 at rho 2e8 (ov0 < 0): qkdyn's line inversion at Phi - Phi(qk0) = -1.9e6 swung between two
# ends 6.5e-10 apart, its values there round-off, and raised "did not converge"; it bisects there now, and qk* holds
# to line_roundoff
@example(case=("FAFO", Setting(classes=8, distinct=20, commons=9, m=12, n=9, scale=1.927129529567793,
                               eta_ov=333876437.95614654, qk0=18.16081712570506, ov0=-0.0964707445689219),
               196790931.20901215, 2.126407706289693))
# a draw whose qk turns at -1.3e55240 (FACO from qk0 -628, ov0 < 0): the reference's search for the turn stepped
# down to it in qk for ever; it searches in u = asinh(qk / w) too, and qkdyn's "beyond the largest double" is right
@example(case=("FACO", Setting(classes=7, distinct=12, commons=7, m=13, n=29, scale=1.2494963190430888,
                               eta_ov=14486798.210081683, qk0=-628.0679185358216, ov0=-1.832551594582403),
               1070.1262426927335, 8.98543001161088e-104))
def test_factorized_qk_state_and_time_match_mpmath_everywhere(case):
    """The reference's time for a factorized QK circuit is a quadrature in qk (tests/mp_reference.py:
    TimeAlongQK), where qk(ov) would cost a quadrature per root-finder step."""
    check_against_reference(*case, time=True)


def psi_cancellation(setting, param, rho):
    """|delta qk| that forming Psi(ov) - Psi(ov0) by subtracting two doubles would cost near ov0:
    rho eps Psi(ov0) M_QK(qk0), the time's relative error where the plateau at ov0 dominates it (the
    integrand is e^-qk there)."""
    from mp_reference import Reference

    ref = Reference(setting, param, rho)
    return float(ref.rho * mp.mpf(2.0**-53) * ref.psi(ref.ov0) * ref.m_qk(ref.qk0))


def test_time_where_psi_differences_would_cancel():
    """FACO from attention 1.8e-278 at rho = 8238 (a hypothesis draw): qk climbs from -640 in a spike at ov0
    whose time is e^-qk. With Psi(ov) - Psi(ov0) formed by subtraction qkdyn's time was 3.2e-8 off the
    reference (psi_cancellation: 2.7e-8; finer panels did not help); the factored gain of the generated
    psi_gain, at quadrature nodes measured from ov0, puts it at 5e-13."""
    setting = Setting(classes=8, distinct=18, commons=22, m=17, n=15, scale=0.40334725280705075,
                      eta_ov=0.7936325663745226, qk0=-639.6476785788774, ov0=1.6511369831363139)
    rho, level = 8237.919464667795, 2.1586820133519649e-94
    assert psi_cancellation(setting, "FACO", rho) > 1e-8  # a case that subtraction gets wrong
    ref = reference(setting, "FACO", rho, level, time=True)
    assert_matches(sharpness(setting, "FACO", rho, level), ref, time=True, t_rel=1e-10)


def test_a_level_just_below_the_initial_loss():
    """CACO at level log 8 - 2.1e-9 from attention 3e-280 at rho = 3.9e5 (a hypothesis draw): z* formed as
    log(K-1) - log(expm1(L)) cancelled to 1e-7 relative (attention 3.4e-8 off); with d = L - log K in
    double-double (simulate.sharpness.z_at_loss) it was 4e-10 off, the rest the root's variable: ov located
    to eps ov0 while qk moves by rho Psi'(ov) / Phi'(qk) per unit of ov. With the root solved in s = ov - ov0
    (simulate.closedform._state) it is 4e-14 off: the range-wide tolerances hold, t to 1e-12."""
    setting = Setting(classes=8, distinct=8, commons=24, m=15, n=8, scale=1.4100944867111678,
                      qk0=-644.2582610761007, ov0=1.715377742020741)
    rho, level = 390881.09472598846, 2.0794415396003783
    ref = reference(setting, "CACO", rho, level, time=True)
    assert_matches(sharpness(setting, "CACO", rho, level), ref, time=True, t_rel=1e-12)


def test_the_reference_line_where_its_constant_dwarfs_qk():
    """CACO at the smallest subnormal level, rho = 8.4e10 (a hypothesis draw): the collapsed line's constant
    C = 5e17 in (m/n) e^qk + qk = C. The reference's qk = C - W((m/n) e^C) cancelled at 24 digits (4e-9 off,
    failing qkdyn's exact qk = 40.8); as log W - log(m/n) it equals the 60-digit value, and qkdyn matches it."""
    from mp_reference import Reference

    setting = Setting(classes=2, distinct=1, commons=1, m=1, n=4, scale=1.9784843532669556, attn0=0.5)
    rho, level = 84441638410.53204, 5e-324
    with mp.workdps(60):
        exact = Reference(setting, "CACO", rho).state(level)[0]
    ref = reference(setting, "CACO", rho, level, time=False)
    assert float(ref["qk"]) == pytest.approx(float(exact), rel=1e-15)
    check_against_reference("CACO", setting, rho, level, time=True)


def test_collapsed_line_where_qk_climbs_more_than_709_from_its_start():
    """CACO from attention 4e-297 (qk0 = -685) at rho = 1.8e11 to the smallest subnormal level (a hypothesis
    draw): qk* = 35.2, so e^{qk0} expm1(qk - qk0) overflowed in the line's Phi (qk - qk0 > 709) and the
    inversion returned qk = 24.4 (attention 1 - 1.3e-12 against 1 - 2.5e-17); Phi now forms e^qk - e^{qk0}
    as -e^qk expm1(qk0 - qk) above qk0."""
    setting = Setting(classes=5, distinct=1, commons=23, m=20, n=1, scale=0.9070026771347051,
                      qk0=-685.4069425002872, ov0=-1.356169519162858)
    check_against_reference("CACO", setting, 178402406923.13083, 5e-324, time=True)


def test_a_level_where_the_roots_function_is_tiny():
    """paper at a level 1.6e-9 below log K from attention 5e-208 (a hypothesis draw): z* = 2e-9, so z(ov) - z* is
    ~1e-26 across the root's last bracket and mpmath's Illinois stopped at |f| < 1e-24, 1.7e-20 relative off in ov
    (the reference's own sign check refused it); the reference's root now converges in x, and qkdyn matches it."""
    setting = Setting(classes=5, distinct=1, commons=1, m=1, n=1, scale=0.8064378743325045, qk0=-477.370020443945,
                      ov0=-0.05492374857139099)
    check_against_reference("paper", setting, 1.0, 1.6094379108246104, time=True)


def test_time_where_ov_moves_by_less_than_a_rounding_of_ov0():
    """paper from attention 1/2 at rho 1e8 .. 1e10 to a level 4.7e-10 below the initial loss (a hypothesis draw): ov
    moves by 1e-14 .. 1e-16 while qk moves by 5e-9. The time's path was ov0 -> ov*, ov* = ov0 + s rounded, so s
    was known to 1% at rho 1e8, 10% at 1e9, and at 1e10 ov* = ov0 made the time 'beyond the largest double'; the
    path is now s itself. A double level is uncertain by a rounding, which moves this t by 1.2e-7 per ulp, and z*
    from it takes a few more (log, expm1): the time must lie within the reference's times at the levels 4 ulps
    away (and 1e-8 beyond them); ~1e-8 would need z* - z0 beyond doubles (not done)."""
    setting = Setting(classes=2, distinct=1, commons=1, m=1, n=1, scale=1.0, qk0=0.0, ov0=1.0)
    level = 0.4740769837060166
    for rho in (1e8, 1e10):
        t = float(sharpness(setting, "paper", rho, level).t)
        bounds = [float(reference(setting, "paper", rho, level + side * 4 * float(np.spacing(level)))["t"]) for side in (1, -1)]
        assert min(bounds) * (1 - 1e-8) <= t <= max(bounds) * (1 + 1e-8), (rho, t, bounds)
        assert float(reference(setting, "paper", rho, level)["t"]) == pytest.approx(t, rel=1e-6)


def test_the_reference_where_ov_moves_by_1e_17_of_ov0():
    """CACO at rho 1e12 from attention 1/2, 1e-6 of the way below the initial loss: ov moves by 6.7e-18. The
    reference's line holds Psi(ov) - Psi(ov0) as a difference, which kept 7 digits at 24: its qk was 1.2e-8 off
    (and qkdyn's time as far from it); with the digits the move costs added, qkdyn's qk and t match it to 1e-10."""
    setting = Setting(classes=2, distinct=1, commons=1, m=1, n=1, scale=1.0, qk0=0.0, ov0=1.0)
    floor, loss0 = reachable_losses(setting, "CACO")
    level = floor + (loss0 - floor) * (1 - 1e-6)
    result, ref = sharpness(setting, "CACO", 1e12, level), reference(setting, "CACO", 1e12, level)
    assert float(result.qk) == pytest.approx(float(ref["qk"]), rel=1e-10)
    assert float(result.t) == pytest.approx(float(ref["t"]), rel=1e-10)


def test_z_at_loss_is_exact_near_the_initial_loss_and_far_from_it():
    """z* against 40-digit arithmetic, from a level 1e-15 below log K to 1e-300."""
    from qkdyn.simulate.sharpness import z_at_loss

    for classes in (2, 8, 1000):
        levels = np.array([math.log(classes) * (1 - f) for f in (1e-15, 1e-12, 1e-9, 1e-3, 0.3, 0.6, 0.9)] + [1e-8, 1e-300])
        with mp.workdps(40):
            exact = [float(mp.log(classes - 1) - mp.log(mp.expm1(mp.mpf(float(x))))) for x in levels]
        np.testing.assert_allclose(z_at_loss(classes, levels), exact, rtol=4e-15)


def test_time_along_qk_where_phi_over_rho_amplifies_the_far_end():
    """FAFO at rho = 1e-12 with ov falling from -0.725 to -7.9e-7 (a hypothesis draw): the line's Phi(qk*) / rho
    turns a 24-digit qk* into ov* 4e-10 off, so the reference's own far-end check refused it; the far end is
    now found at the quadrature's 40 digits, and qkdyn's state and time match."""
    setting = Setting(classes=2, distinct=17, commons=26, m=19, n=1, scale=1.264322509352266,
                      qk0=-2.9444389791664403, ov0=-0.7252022626756831)
    rho, level = 1e-12, 0.6931473782062041
    check_against_reference("FAFO", setting, rho, level, time=True)


@pytest.mark.parametrize("param, setting, rho, level", [
    ("CACO", Setting(ov0=-2.0, qk0=0.5), 30.0, 0.1),  # qk falls to ~ -225 and turns at ov = 0
    ("CAFO", Setting(ov0=0.3, attn0=1e-12), 1e-9, 1e-30),  # qk barely moves; e^z grows at the end
])
def test_the_two_time_references_agree(param, setting, rho, level):
    """The time of the mpmath reference in ov (root finding for qk at each node) and in qk (ov explicit, no
    root finding) agree to 1e-14 where both apply (collapsed QK): neither shares the other's quadrature."""
    along_ov = reference(setting, param, rho, level)
    along_qk = reference(setting, param, rho, level, along_qk=True)
    assert float(along_qk["t"]) == pytest.approx(float(along_ov["t"]), rel=1e-14)


@pytest.mark.parametrize("param, setting, rho, level", [
    ("CACO", Setting(ov0=-2.0, qk0=0.5), 30.0, 0.1),  # qk turns at ~ -225
    ("FACO", Setting(ov0=-0.5, qk0=0.2), 3.0, 0.01),
    ("FACO", Setting(ov0=-0.5), 10.0, 0.1),  # qk turns at -8.1e7: t = e^(8.1e7), the bound e^(4.0e7)
])
def test_the_time_bound_across_a_turn_is_below_the_time(param, setting, rho, level):
    """TimeAlongQK.turn_bound, which stands for t where it exceeds the largest double, is below the time the
    quadrature in v computes where that quadrature resolves qk."""
    from mp_reference import QK_DPS, Reference, TimeAlongQK

    with mp.workdps(QK_DPS):
        qk_star, ov_star, _ = Reference(setting, param, rho).state(level)
        along_qk = TimeAlongQK(Reference(setting, param, rho))
        t = along_qk.time(qk_star, ov_star, bound=False)
        assert 0 < along_qk.turn_bound(along_qk.turn(), qk_star) < t


# -- the frozen-attention closed form (theory/frozen.py) to t = 1e300 ---------------------------------

@pytest.mark.parametrize("setting", [Setting(), Setting(classes=2, qk0=-3.0, ov0=-1.5, eta_ov=7.0),
                                     Setting(classes=20, distinct=1, attn0=0.999, ov0=2.0)])
def test_frozen_closed_form_matches_mpmath_to_1e300(setting):
    """e^z + (K-1) z = e^z0 + (K-1) z0 + eta_OV alpha^2 t / D solved by mpmath at 40 digits: the closed form
    agrees to 1e-10 relative for t from 1e-3 to 1e300 (the difference form was wrong from t ~ 1e20)."""
    from qkdyn.theory.frozen import caco_ov

    times = np.geomspace(1e-3, 1e300, 60)
    got = caco_ov(times, setting)
    with mp.workdps(40):
        a = 1 / (1 + setting.n / (setting.m * mp.exp(setting.qk0)))
        k1, z0 = setting.classes - 1, a * setting.ov0
        for t, value in zip(times, got, strict=True):
            c = mp.exp(z0) + k1 * z0 + setting.eta_ov * a * a * mp.mpf(t) / setting.distinct
            z = mp.findroot(lambda z, c=c: (mp.exp(z) + k1 * z) / c - 1, mp.log(c) if c > 3 else z0, tol=mp.mpf(10) ** -35)
            assert value == pytest.approx(float(z / a), rel=1e-10)


@pytest.mark.parametrize("param", ["CAFO", "FAFO"])
@pytest.mark.parametrize(("rho", "attn0"), [(1e-200, 1e-200), (1e-250, 1e-300), (1e-300, 1e-300)])
def test_tiny_rho_from_tiny_attention_keeps_the_bisection_finite(param, rho, attn0):
    """A factorized OV circuit at rho 1e-300..1e-200 from attention 1e-200..1e-300: the root's bracket spans
    1e200-1e300, where the safeguarded Newton's wide-bracket split sqrt(w (hi - lo)) overflowed; the state was then
    qk = ov = inf, attn = 1 (no error). Against mpmath."""
    setting = Setting(attn0=attn0)
    result = sharpness(setting, param, rho, 1e-3, time=False)
    assert np.isfinite([float(result.qk), float(result.ov), float(result.attn)]).all()
    assert_matches(result, reference(setting, param, rho, 1e-3, time=False), time=False)
