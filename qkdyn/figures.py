"""Figures fit for a paper: one style for every plot the project writes, a layout check, PNG + PDF.

* :data:`STYLE` is the ``qkdyn`` matplotlib style sheet (``qkdyn/styles/qkdyn.mplstyle``): fonts and
  sizes for a two-column paper, constrained layout, the Okabe-Ito colour-blind-safe palette
  (:data:`PALETTE`), viridis for maps. Importing this module applies it (every plotting module of
  qkdyn imports it); in your own code ``matplotlib.pyplot.style.use(qkdyn.figures.STYLE)``.
* :func:`colorbar` adds a colour bar that always has a label.
* :func:`layout_problems` lists what makes a figure unfit: text (labels, tick labels, titles,
  legends) running into another axes or into another axes' text, and axes or colour bars without a
  label. :func:`save_png` warns (:class:`FigureLayoutWarning`) on each; the tests turn it into an error.
* :func:`save_png` writes the PNG and a PDF beside it (vector, for papers), atomically; log-axis tick
  labels are written as plain text (``10⁻³``, ``2×10⁻³``: :class:`PlainLogFormatter`), not mathtext.
"""
from __future__ import annotations

import contextlib
import functools
import io
import os
import warnings
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib import font_manager  # noqa: E402
from matplotlib.backends import _backend_pdf_ps  # noqa: E402
from matplotlib.ticker import LogFormatterSciNotation  # noqa: E402

from qkdyn.atomic import atomic_path  # noqa: E402

#: the qkdyn style sheet
STYLE = str(Path(__file__).with_name("styles") / "qkdyn.mplstyle")

#: Okabe-Ito colours (colour-blind safe), in the style's cycle order
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")

plt.style.use(STYLE)


_SUPERSCRIPT = str.maketrans("0123456789-", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻")


class PlainLogFormatter(LogFormatterSciNotation):
    """matplotlib's log-axis tick labels (``LogFormatterSciNotation``: ``10^-3``, ``2 x 10^-3``) as plain
    text with Unicode superscripts, ``10⁻³`` and ``2×10⁻³``, instead of mathtext. The same labels; but
    mathtext is parsed again for every string at every resolution a figure is drawn at (the layout, the
    PNG, the PDF), which was a third of the time of drawing a figure with log axes."""

    def __call__(self, x, pos=None):
        return plain_text(super().__call__(x, pos))


def plain_text(label: str) -> str:
    """A label of ``LogFormatterSciNotation`` (``$\\mathdefault{-2\\times10^{-3}}$``) as plain text
    (``−2×10⁻³``); anything else it does not know is returned as it is."""
    prefix, suffix = "$\\mathdefault{", "}$"
    if not (label.startswith(prefix) and label.endswith(suffix)):
        return label
    body = label[len(prefix):-len(suffix)].replace("\\times", "×")
    if "^{" in body and body.endswith("}"):
        base, exponent = body[:-1].split("^{", 1)
        body = base + exponent.translate(_SUPERSCRIPT)
    if any(c in body for c in "\\{}^$"):
        return label
    return "\u2212" + body[1:] if body.startswith("-") else body


def _plain_log_labels(fig) -> None:
    """Every formatter of ``fig``'s axes (colour bars included) that is a ``LogFormatterSciNotation``
    becomes a :class:`PlainLogFormatter` (its subclass without state of its own: the same settings)."""
    for ax in fig.get_axes():
        for axis in (ax.xaxis, ax.yaxis):
            for formatter in (axis.get_major_formatter(), axis.get_minor_formatter()):
                if type(formatter) is LogFormatterSciNotation:
                    formatter.__class__ = PlainLogFormatter


class FigureLayoutWarning(UserWarning):
    """A figure has overlapping text or an unlabelled axis (see :func:`layout_problems`)."""


def colorbar(fig, mappable, ax, label: str, **kwargs: Any):
    """``fig.colorbar(mappable, ax=ax)`` with its ``label`` (required: a colour bar says what it shows)."""
    if not label:
        raise ValueError("a colour bar needs a label")
    bar = fig.colorbar(mappable, ax=ax, **kwargs)
    bar.set_label(label)
    return bar


def _texts(ax, renderer) -> list[tuple[str, Any]]:
    """(description, window extent) of every visible, non-empty text artist an axes draws."""
    out = []
    named = [("x label", ax.xaxis.label), ("y label", ax.yaxis.label), ("title", ax.title),
             ("left title", ax._left_title), ("right title", ax._right_title)]
    for axis, which in ((ax.xaxis, "x"), (ax.yaxis, "y")):
        for tick in axis._update_ticks():  # the ticks actually drawn
            for label in (tick.label1, tick.label2):
                named.append((f"{which} tick label {label.get_text()!r}", label))
    named += [("text", text) for text in ax.texts]
    for name, artist in named:
        if artist.get_visible() and artist.get_text():
            out.append((f"{name} ({artist.get_text()!r})" if "tick" not in name else name,
                        artist.get_window_extent(renderer)))
    legend = ax.get_legend()
    if legend is not None and legend.get_visible():
        out.append(("legend", legend.get_window_extent(renderer)))
    return out


def _overlap(a: list, b: list, pad: float = 1.0) -> np.ndarray:
    """Which bounding boxes intersect by more than ``pad`` pixels in both directions: every box of the list ``a``
    against every box of ``b`` (a len(a) x len(b) array of booleans)."""
    ea, eb = (np.reshape([box.extents for box in boxes], (-1, 4)) for boxes in (a, b))  # rows (x0, y0, x1, y1)
    span = lambda lo, hi: np.minimum(ea[:, None, hi], eb[None, :, hi]) - np.maximum(ea[:, None, lo], eb[None, :, lo])
    return (span(0, 2) > pad) & (span(1, 3) > pad)


def _labelled_by_a_sibling(ax, which: str) -> bool:
    """Whether an axes that shares ``ax``'s x or y axis (``sharey=True`` and ``label_outer``: one label per
    row) carries that axis's label."""
    shared = ax.get_shared_y_axes() if which == "y" else ax.get_shared_x_axes()
    return any((other.get_ylabel() if which == "y" else other.get_xlabel())
               for other in shared.get_siblings(ax) if other is not ax)


def layout_problems(fig, *, drawn: bool = False) -> list[str]:
    """Every text artist that overlaps another axes or another axes' text, and every axes or colour
    bar without a label (tight bounding boxes from a draw without rendering; ``drawn``: the figure holds
    its current layout already, so none is made here)."""
    if not drawn:
        fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()
    axes = [ax for ax in fig.get_axes() if ax.get_visible() and ax.axison]
    problems, boxes = [], {}
    for index, ax in enumerate(axes):
        bar = getattr(ax, "_colorbar", None)
        where = f"axes {index} ({ax.get_title() or ax.get_ylabel() or 'untitled'})"
        if bar is not None:
            if not (ax.get_ylabel() if bar.orientation == "vertical" else ax.get_xlabel()):
                problems.append(f"colour bar of {where} has no label")
        else:
            for which, label in (("x", ax.get_xlabel()), ("y", ax.get_ylabel())):
                if not label and not _labelled_by_a_sibling(ax, which):
                    problems.append(f"{where} has no {which} label")
        boxes[index] = _texts(ax, renderer)
    frames = [ax.get_window_extent(renderer) for ax in axes]
    texts = [(index, name, box) for index, found in boxes.items() for name, box in found]  # in axes order
    owner = np.array([index for index, _, _ in texts], dtype=int)
    frame_hit = _overlap([b for _, _, b in texts], frames) & (owner[:, None] != np.arange(len(axes)))
    text_hit = _overlap([b for _, _, b in texts], [b for _, _, b in texts]) & (owner[:, None] < owner[None, :])
    for i, (index, name, _) in enumerate(texts):  # each text: the other axes it overlaps, then later axes' texts
        problems += [f"{name} of axes {index} overlaps axes {other}" for other in np.flatnonzero(frame_hit[i])]
        problems += [f"{name} of axes {index} overlaps {texts[j][1]} of axes {texts[j][0]}"
                     for j in np.flatnonzero(text_hit[i])]
    title = fig._suptitle
    if title is not None and title.get_text():
        hit = _overlap([title.get_window_extent(renderer)], frames)[0]
        problems += [f"the figure title overlaps axes {i}" for i in np.flatnonzero(hit)]
    return problems


def _tick_key(axis) -> tuple:
    """What an axis's ticks (locations, labels, which are drawn) are computed from: its view interval, its
    locators and formatters, the axes' box in pixels (tick spacing) and the figure's resolution."""
    return (tuple(axis.get_view_interval()), tuple(axis.axes.bbox.bounds), axis.axes.figure.dpi,
            id(axis.major.locator), id(axis.major.formatter), id(axis.minor.locator), id(axis.minor.formatter))


class _TicksOnce:
    """An axis's ``_update_ticks`` computed again only when :func:`_tick_key` changes (see :func:`_ticks_once`)."""

    def __init__(self, axis):
        self.axis, self.update, self.key, self.ticks = axis, axis._update_ticks, None, None

    def __call__(self):
        key = _tick_key(self.axis)
        if key != self.key:
            self.key, self.ticks = key, self.update()
        return self.ticks


@contextlib.contextmanager
def _ticks_once(fig):
    """While saving ``fig``: each axis computes its ticks (locator, formatter, tick labels) once per distinct
    :func:`_tick_key`, not at every one of the dozens of places a draw asks for them (the layout's tight
    boxes of every axes, the spines, label and title positions, the siblings of shared axes, the draw itself).
    The ticks returned are the very ones a fresh computation would set (the same locations and labels on the
    same tick objects), so the files are the same bytes; afterwards each axis computes them as before."""
    axes = [axis for ax in fig.get_axes() for axis in ax._axis_map.values()]
    for axis in axes:
        axis._update_ticks = _TicksOnce(axis)  # an instance attribute over the method, removed again below
    try:
        yield
    finally:
        for axis in axes:
            del axis._update_ticks


def _layout_key(text, renderer) -> tuple:
    """What a text's layout (``Text._get_layout``: its box, lines and their offsets about its anchor) is computed
    from: the renderer (its text metrics), the string, the font, the figure's resolution, TeX and mathtext,
    line spacing, alignments, rotation and its mode. Not its position: the layout is relative to the anchor.
    (``text.figure``, not ``get_figure(root=True)``: the same resolution, in every matplotlib >= 3.7.)"""
    return (renderer, text.get_text(), tuple(text._fontproperties.__dict__.items()), text.figure.dpi,
            text.get_usetex(), text.get_parse_math(), text._linespacing, text._get_multialignment(),
            text.get_rotation(), text._horizontalalignment, text._verticalalignment, text.get_rotation_mode())


@contextlib.contextmanager
def _text_layouts_once():
    """While saving a figure: each text layout (``matplotlib.text.Text._get_layout``) is computed once per
    distinct :func:`_layout_key`, not at each of the many places a draw asks for it (every tick label's box, at
    each tight box of the layout engine and at each draw); a wrapped text (its lines depend on its position) is
    laid out each time. Each caller gets its own copy of the box, so the files are the same bytes."""
    from matplotlib.text import Text

    layout, layouts = Text._get_layout, {}

    def once(text, renderer):
        if text.get_wrap():
            return layout(text, renderer)
        key = _layout_key(text, renderer)
        if key not in layouts:
            layouts[key] = layout(text, renderer)
        box, lines, corner = layouts[key]
        return box.frozen(), list(lines), corner

    Text._get_layout = once
    try:
        yield
    finally:
        Text._get_layout = layout


#: the characters of the first of a PDF font's two subsets (:func:`_two_stage_font_subsets`): printable ASCII,
#: the minus sign, the tick labels' ``×`` and superscripts, ligatures, Greek and common maths
COMMON_CHARACTERS = ("".join(map(chr, range(0x20, 0x7F))) + "\u2212×·±≤≥≈∞→⁰¹²³⁴⁵⁶⁷⁸⁹⁻ﬁﬂ"
                     + "αβγδεζηθικλμνξοπρστυφχψωΓΔΘΛΞΠΣΦΨΩ")

#: matplotlib's own font subsetting (fontTools), which :func:`_two_stage_font_subsets` wraps
_MATPLOTLIB_SUBSET = _backend_pdf_ps.get_glyphs_subset


class _FontBytes(io.BytesIO):
    """A font file in memory, as matplotlib's subsetting reads a path (it asks for the face of a collection)."""

    face_index = 0


@functools.lru_cache(maxsize=8)
def _common_subset(path: str, face_index: int) -> tuple[bytes, dict]:
    """matplotlib's subset of the font ``path`` (face ``face_index``) to the glyphs of :data:`COMMON_CHARACTERS`
    it has: the subset font's bytes and the map from the font's glyph indices to the subset's."""
    fontfile = font_manager.FontPath(path, face_index)
    charmap = font_manager.get_font(fontfile).get_charmap()
    with _MATPLOTLIB_SUBSET(fontfile, {charmap[ord(c)] for c in COMMON_CHARACTERS if ord(c) in charmap}) as subset:
        return _backend_pdf_ps.font_as_file(subset.font).getvalue(), dict(subset.glyph_index_map)


@contextlib.contextmanager
def _subset_in_two_stages(fontfile, glyphs):
    """matplotlib's ``get_glyphs_subset(fontfile, glyphs)`` (>= 3.11: glyph indices in, ``SubsetResults`` out),
    made from :func:`_common_subset` (once per font and process) when it holds every glyph asked for: the
    same glyphs, outlines and metrics, but fontTools then parses a font of about 150 glyphs instead of the
    whole font (DejaVu Sans: 6000), a quarter of the time. The glyph map composes the two stages' maps.
    Glyphs outside the common subset: matplotlib's one stage."""
    data, first = _common_subset(str(fontfile), fontfile.face_index)
    if not set(glyphs) <= first.keys():
        with _MATPLOTLIB_SUBSET(fontfile, glyphs) as subset:
            yield subset
        return
    with _MATPLOTLIB_SUBSET(_FontBytes(data), {first[g] for g in glyphs}) as subset:
        yield _backend_pdf_ps.SubsetResults(subset.font, {g: subset.glyph_index_map[first[g]] for g in glyphs})


@contextlib.contextmanager
def _two_stage_font_subsets():
    """While saving a PDF: every font subset is :func:`_subset_in_two_stages`. Only for the subsetting API it is
    written for (matplotlib >= 3.11); with any other, matplotlib subsets as it always does."""
    if not (hasattr(_backend_pdf_ps, "SubsetResults") and hasattr(font_manager, "FontPath")):
        yield
        return
    _backend_pdf_ps.get_glyphs_subset = _subset_in_two_stages
    try:
        yield
    finally:
        _backend_pdf_ps.get_glyphs_subset = _MATPLOTLIB_SUBSET


def save_png(fig, path: str | os.PathLike) -> Path:
    """Write ``fig`` to ``path`` as a PNG and beside it a PDF (same name, ``.pdf``), atomically, then
    close it. Each problem :func:`layout_problems` finds is a :class:`FigureLayoutWarning`.

    The figure is laid out once: one draw without rendering runs the layout engine and gives the layout
    check and the tight bounding box (``savefig.bbox: tight`` with ``savefig.pad_inches``); both files are then
    rendered from that layout with the engine off and the box given, so neither save lays out the text
    again (matplotlib's own ``bbox_inches="tight"`` costs a layout draw and a box per file). Meanwhile each
    axis's ticks (:func:`_ticks_once`) and each distinct text (:func:`_text_layouts_once`) are laid out once,
    and the PDF's font subsets are made from a once-made subset of the common characters
    (:func:`_two_stage_font_subsets`): the files are the bytes matplotlib writes without these (tests), in
    75-86% of the time (benchmarks/bench_figures.py; 77% on the 20 figures of ``qkdyn verify``)."""
    path = Path(path)
    _plain_log_labels(fig)
    with _ticks_once(fig), _text_layouts_once(), _two_stage_font_subsets():
        fig.draw_without_rendering()  # the layout and every artist's extent, without rasterising the figure
        problems = layout_problems(fig, drawn=True)  # the layout as saved
        box = None
        if matplotlib.rcParams["savefig.bbox"] == "tight":
            box = fig.get_tightbbox(fig.canvas.get_renderer()).padded(matplotlib.rcParams["savefig.pad_inches"])
        # laid out above: the saves only render. No layout engine at all (``"none"`` leaves a placeholder
        # engine, and with any engine savefig runs one more layout draw per file); with the style's
        # constrained layout switched off, None would otherwise select it again. The saves run inside the
        # switch too: each savefig sets the engine to "none" and back to None on its way out, which outside
        # it would select constrained layout again for the next file (the PDF laid out anew)
        with matplotlib.rc_context({"figure.constrained_layout.use": False, "figure.autolayout": False}):
            fig.set_layout_engine(None)
            for target, fmt in ((path, "png"), (path.with_suffix(".pdf"), "pdf")):
                with atomic_path(target) as tmp:  # a PDF without its creation date: equal runs, equal bytes
                    fig.savefig(tmp, format=fmt, bbox_inches=box,
                                metadata={"CreationDate": None} if fmt == "pdf" else None)
    for problem in problems:
        warnings.warn(f"{path.name}: {problem}", FigureLayoutWarning, stacklevel=2)
    plt.close(fig)
    return path
