"""Turn the registry corpora's raw formats into plain text.

* :func:`strip_wikitext` removes MediaWiki markup (templates, tables, references, links, emphasis,
  headings, HTML) and keeps the prose of an article.
* :func:`wiki_dump_articles` yields the prose of every main-namespace, non-redirect article of a
  (bz2-compressed) MediaWiki XML dump.
* :func:`detag_brown` turns one Brown corpus file (``word/tag`` tokens, a sentence a line) into
  plain sentences, one per line.
"""
from __future__ import annotations

import bz2
import html
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

_COMMENT = re.compile(r"<!--.*?-->", re.S)
_REF = re.compile(r"<ref[^>/]*/>|<ref[^>]*>.*?</ref>", re.S | re.I)
_TAG = re.compile(r"<[^>]+>")
_FILE_LINK = re.compile(r"\[\[(?:File|Image|Category|[a-z]{2,3}(?:-[a-z]+)?):[^\[\]]*(?:\[\[[^\]]*\]\][^\[\]]*)*\]\]", re.I)
_LINK = re.compile(r"\[\[(?:[^|\]]*\|)?([^\]]*)\]\]")
_EXT_LINK = re.compile(r"\[(?:https?|ftp)://\S+\s*([^\]]*)\]")
_HEADING = re.compile(r"^=+\s*(.*?)\s*=+\s*$", re.M)
_EMPHASIS = re.compile(r"'{2,}")
_LIST_MARK = re.compile(r"^[*#:;]+\s*", re.M)
_BLANKS = re.compile(r"\n{3,}")


def _drop_nested(text: str, open_: str, close: str) -> str:
    """Remove every (possibly nested) ``open_ ... close`` span."""
    out, depth, i = [], 0, 0
    while i < len(text):
        if text.startswith(open_, i):
            depth += 1
            i += len(open_)
        elif depth and text.startswith(close, i):
            depth -= 1
            i += len(close)
        else:
            if not depth:
                out.append(text[i])
            i += 1
    return "".join(out)


def strip_wikitext(text: str) -> str:
    """Plain prose of one article's wikitext."""
    text = html.unescape(text)
    text = _COMMENT.sub("", text)
    text = _REF.sub("", text)
    text = _drop_nested(text, "{{", "}}")
    text = _drop_nested(text, "{|", "|}")
    text = _FILE_LINK.sub("", text)
    text = _LINK.sub(r"\1", text)
    text = _EXT_LINK.sub(r"\1", text)
    text = _TAG.sub("", text)
    text = _HEADING.sub(r"\1", text)
    text = _EMPHASIS.sub("", text)
    text = _LIST_MARK.sub("", text)
    text = html.unescape(text).replace("\u00a0", " ")
    lines = [line.strip() for line in text.splitlines()]
    return _BLANKS.sub("\n\n", "\n".join(lines)).strip()


def wiki_dump_articles(path: Path) -> Iterator[str]:
    """Prose of each main-namespace, non-redirect article in a .xml.bz2 MediaWiki dump."""
    with bz2.open(path, "rb") as fh:
        ns, text = None, None
        for _, elem in ET.iterparse(fh, events=("end",)):
            tag = elem.tag.rsplit("}", 1)[-1]
            if tag == "ns":
                ns = elem.text
            elif tag == "text":
                text = elem.text or ""
            elif tag == "page":
                if ns == "0" and text and not text.lstrip().upper().startswith("#REDIRECT"):
                    prose = strip_wikitext(text)
                    if prose:
                        yield prose
                ns, text = None, None
                elem.clear()


_SPACE_BEFORE = re.compile(r" ([,.;:?!)\]}]|'s\b|n't\b|'')")
_SPACE_AFTER = re.compile(r"([(\[{]|``) ")


def detag_brown(raw: str) -> str:
    """Plain sentences (one a line) of a Brown corpus file in ``word/tag`` format."""
    sentences = []
    for line in raw.splitlines():
        words = [tok.rsplit("/", 1)[0] for tok in line.split()]
        if not words:
            continue
        sentence = _SPACE_AFTER.sub(r"\1", _SPACE_BEFORE.sub(r"\1", " ".join(words)))
        sentences.append(sentence.replace("``", '"').replace("''", '"'))
    return "\n".join(sentences)
