// Typesets the formulas pymdownx.arithmatex marks (generic mode: <span class="arithmatex">\(...\)</span>,
// <div class="arithmatex">\[...\]</div>) with KaTeX, whose files the site carries (docs/assets/katex),
// on every page load, mkdocs-material's instant navigation included.
function typeset() {
  for (const element of document.querySelectorAll(".arithmatex")) {
    const tex = element.textContent.trim();
    katex.render(tex.slice(2, -2), element, {displayMode: tex.startsWith("\\["), throwOnError: false});
  }
}
if (typeof document$ !== "undefined") {
  document$.subscribe(typeset);
} else {
  document.addEventListener("DOMContentLoaded", typeset);
}
