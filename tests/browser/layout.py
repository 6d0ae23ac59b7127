"""What a page's layout does wrong at the viewport's width, measured in the page itself.

Five rules, each reported with the element it is about:

- **no sideways scroll of the page**: ``document.documentElement.scrollWidth`` is at most the
  viewport's width; when it is more, the elements that first cross the right edge (their parent
  does not) are named;
- **no word broken inside**: every visible text node's tokens (runs without white space) are
  measured with ``Range.getClientRects``; a token whose rectangles lie on more than one line is
  broken there, which is a fault when the break falls between two letters or digits ("202|6",
  "activ|e", "Revok|e") or anywhere in a number, date or time ("2026-|12-06", "0.|00"). A break
  after a hyphen or slash in a name ("NVIDIA-|H100") is where the browser may break on its own;
  a token longer than ``OPAQUE`` characters (a digest, a token, a URL) may break anywhere, and
  ``pre``, ``textarea`` and SVG text never wrap;
- **prose readable without scrolling**: no line of a text node with several words is wider than
  the sideways-scrolling box it is in (a table's caption as wide as the table, say);
- **no content hidden sideways without a cue**: an element that scrolls sideways and has more
  than it shows has a scroll shadow (a gradient in its ``background-image``, as ``.table-wrap``
  and ``.chart-figure`` have in static/css/portal.css);
- **every action within reach**: each visible button (``button``, ``a.button``, submit inputs,
  ``[role=button]``) lies inside the viewport and inside what its scrolling container shows, or
  that container is itself inside the viewport and has the cue.
"""
from __future__ import annotations

from dataclasses import dataclass

from playwright.sync_api import Page

# One evaluation per page and width; returns a list of {rule, element, detail}.
_CHECK = r"""
() => {
  const root = document.documentElement;
  const width = root.clientWidth;
  const problems = [];
  const slack = 0.5;

  const describe = (element) => {
    if (!element || element.nodeType !== 1) return String(element);
    let name = element.tagName.toLowerCase();
    if (element.id) name += "#" + element.id;
    const classes = [...element.classList].slice(0, 3);
    if (classes.length) name += "." + classes.join(".");
    const labelled = element.closest("[id]");
    if (!element.id && labelled && labelled !== document.body && labelled !== root) {
      name += " in #" + labelled.id;
    }
    const text = (element.innerText || element.value || "").replace(/\s+/g, " ").trim();
    if (text) name += ' "' + (text.length > 40 ? text.slice(0, 40) + "…" : text) + '"';
    return name;
  };
  const scrollsSideways = (element) => {
    const overflow = getComputedStyle(element).overflowX;
    return overflow === "auto" || overflow === "scroll";
  };
  const scroller = (element) => {
    for (let up = element.parentElement; up && up !== document.body && up !== root;
         up = up.parentElement) {
      if (scrollsSideways(up)) return up;
    }
    return null;
  };
  // Shown, and not clipped to a pixel as text for screen readers only is.
  const visible = (element) => {
    if (!element.checkVisibility({visibilityProperty: true})) return false;
    const box = element.getBoundingClientRect();
    return box.width > 1 && box.height > 1;
  };

  // 1. The page itself scrolls sideways.
  if (root.scrollWidth > width) {
    const culprits = [];
    for (const element of document.body.querySelectorAll("*")) {
      if (culprits.length >= 4) break;
      if (!visible(element) || scroller(element)) continue;
      const right = element.getBoundingClientRect().right + window.scrollX;
      const parent = element.parentElement;
      const parentRight = parent.getBoundingClientRect().right + window.scrollX;
      if (right > width + slack && parentRight <= width + slack) {
        culprits.push(describe(element) + " reaches " + Math.round(right) + " px");
      }
    }
    problems.push({rule: "page scrolls sideways", element: "html",
                   detail: "scrollWidth " + root.scrollWidth + " px > viewport " + width
                           + " px; first past the edge: " + (culprits.join("; ") || "?")});
  }

  // 2. Words broken inside.
  const letterOrDigit = /[\p{L}\p{N}]/u;
  const numeric = /^[\p{N}][\p{N}.,:\-\/+%\u00d7]*$/u;
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const range = document.createRange();
  const lineOf = (node, offset) => {
    range.setStart(node, offset);
    range.setEnd(node, offset + 1);
    const rects = [...range.getClientRects()].filter((r) => r.width > 0);
    return rects.length ? rects[0].top : null;
  };
  const OPAQUE = 32;
  const UNWRAPPED = "script, style, svg, pre, textarea, noscript, template";
  const broken = [];
  const wide = [];
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const parent = node.parentElement;
    if (!parent || parent.closest(UNWRAPPED)) continue;
    if (!/\S{2}/.test(node.data) || !visible(parent)) continue;
    const box = /\S\s+\S/.test(node.data) ? scroller(parent) : null;
    if (box) {
      range.selectNodeContents(node);
      const widest = Math.max(...[...range.getClientRects()].map((r) => r.width));
      if (widest > box.clientWidth + 1) {
        wide.push({rule: "text wider than its scrolling box", element: describe(parent),
                   detail: "a line of " + Math.round(widest) + " px in " + describe(box)
                           + ", " + box.clientWidth + " px wide: read only by scrolling"});
      }
    }
    for (const match of node.data.matchAll(/\S{2,}/g)) {
      if (match[0].length > OPAQUE) continue;
      range.setStart(node, match.index);
      range.setEnd(node, match.index + match[0].length);
      const tops = [...range.getClientRects()].filter((r) => r.width > 0).map((r) => r.top);
      if (tops.length < 2 || Math.max(...tops) - Math.min(...tops) < 2) continue;
      const token = match[0];
      const first = lineOf(node, match.index);
      for (let i = 1; i < token.length; i++) {
        const top = lineOf(node, match.index + i);
        if (top === null || first === null || Math.abs(top - first) < 2) continue;
        const before = token[i - 1];
        const after = token[i];
        if ((letterOrDigit.test(before) && letterOrDigit.test(after)) || numeric.test(token)) {
          broken.push({rule: "word broken inside", element: describe(parent),
                       detail: '"' + token.slice(0, i) + "|" + token.slice(i) + '"'});
        }
        break;
      }
    }
  }
  problems.push(...wide.slice(0, 4), ...broken.slice(0, 8));
  if (broken.length > 8) {
    problems.push({rule: "word broken inside", element: "…",
                   detail: (broken.length - 8) + " more"});
  }

  // 3. Content hidden in a sideways scroll without a cue.
  const cued = (element) => getComputedStyle(element).backgroundImage.includes("gradient");
  for (const element of document.body.querySelectorAll("*")) {
    if (!scrollsSideways(element) || element.scrollWidth <= element.clientWidth + 1) continue;
    if (!visible(element) || cued(element)) continue;
    problems.push({rule: "sideways scroll without a cue", element: describe(element),
                   detail: "shows " + element.clientWidth + " of " + element.scrollWidth
                           + " px and no scroll shadow"});
  }

  // 4. Actions out of reach.
  const actions = document.querySelectorAll(
    "button, a.button, input[type=submit], input[type=button], [role=button]");
  for (const action of actions) {
    if (!visible(action)) continue;
    const box = action.getBoundingClientRect();
    const container = scroller(action);
    const shown = container ? container.getBoundingClientRect() : {left: 0, right: width};
    if (box.left >= Math.max(0, shown.left) - slack
        && box.right <= Math.min(width, shown.right) + slack) continue;
    if (!container) {
      problems.push({rule: "action outside the viewport", element: describe(action),
                     detail: "spans " + Math.round(box.left) + "-" + Math.round(box.right)
                             + " px of " + width + " px, in no scrolling container"});
      continue;
    }
    const outer = container.getBoundingClientRect();
    if (outer.left < -slack || outer.right > width + slack) {
      problems.push({rule: "action outside the viewport", element: describe(action),
                     detail: "its scrolling container " + describe(container) + " spans "
                             + Math.round(outer.left) + "-" + Math.round(outer.right) + " px"});
    } else if (!cued(container)) {
      problems.push({rule: "action scrolled out of view without a cue", element: describe(action),
                     detail: "its scrolling container " + describe(container)
                             + " shows no scroll shadow"});
    }
  }
  return problems;
}
"""


@dataclass(frozen=True)
class Problem:
    rule: str
    element: str
    detail: str

    def __str__(self) -> str:
        return f"{self.rule}: {self.element}: {self.detail}"


def layout_problems(page: Page) -> list[Problem]:
    """The page's layout faults at its current viewport width (see the module's rules)."""
    found: list[dict[str, str]] = page.evaluate(_CHECK)
    return [Problem(item["rule"], item["element"], item["detail"]) for item in found]
