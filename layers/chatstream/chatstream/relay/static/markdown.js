// The reply's Markdown, rendered as it streams. markdown-it (vendor/, pinned; its README there) parses the
// text with raw HTML off; this file builds the elements from its tokens itself, from a fixed list of tags,
// and never uses markdown-it's HTML renderer or parses HTML: text only ever reaches the page as text nodes,
// so markup in a reply (`<img onerror=…>`, `<script>`) stays text, and no attribute the strict
// Content-Security-Policy forbids (an inline style: a table cell's alignment) is ever written.
//
// Links open in a new tab without an opener or a referrer, and only for http, https and mailto; any other
// link stays the text it was written as. Images are not loaded (another origin, and the policy forbids it):
// `![alt](url)` shows as its alt text, a link to the image (inside a link, that link's text). A code fence still open (its closing ``` not
// received yet) is a code block, as CommonMark reads a fence that runs to the end, marked `open` while the reply
// streams: a reply that ended inside one (cut at its token limit, stopped) shows it as a plain code block.
//
// StreamingMarkdown keeps one element's source text and draws all of it again as it grows: at most once an
// animation frame, and less often when drawing is slow (a very long reply), so drawing never takes more than
// a third of the time. The blocks that did not change keep their elements (a selection in them survives).
"use strict";

(function () {
  const md = window.markdownit({ html: false, linkify: true, breaks: true, typographer: false });
  // Bare URLs with a scheme become links; "app.py" or "a.md" are file names, not domains.
  md.linkify.set({ fuzzyLink: false, fuzzyEmail: false });
  const SAFE_URL = /^(?:https?:|mailto:)/i;
  md.validateLink = (url) => SAFE_URL.test(url.trim());

  // Tags a paired token (nesting 1 … -1) may create; any other is left out, its content kept.
  const PAIRED = new Set([
    "p", "h1", "h2", "h3", "h4", "h5", "h6", "blockquote", "ul", "ol", "li",
    "table", "thead", "tbody", "tr", "th", "td", "em", "strong", "s", "a",
  ]);
  const ALIGN = /^text-align:(left|center|right)$/;
  // Blocks of text, each of which takes its direction from its own text (dir="auto").
  const TEXT_BLOCKS = new Set(["p", "h1", "h2", "h3", "h4", "h5", "h6", "li", "th", "td"]);

  // A link to `href` that opens in a new tab, with no opener and no referrer; a span for any other scheme.
  function link(href, title) {
    if (!SAFE_URL.test(href || "")) return document.createElement("span");
    const node = document.createElement("a");
    node.href = href;
    node.target = "_blank";
    node.rel = "noopener noreferrer";
    if (title) node.title = title;
    return node;
  }

  function opened(token) {
    if (token.hidden || !PAIRED.has(token.tag)) return null; // a tight list's paragraphs have no element
    if (token.tag === "a") return link(token.attrGet("href"), token.attrGet("title"));
    const node = document.createElement(token.tag);
    if (TEXT_BLOCKS.has(token.tag)) node.dir = "auto"; // each block right to left when its text is
    if (token.tag === "ol") {
      const start = token.attrGet("start"); // only where the list does not start at 1
      if (start !== null && /^\d{1,9}$/.test(start)) node.start = Number(start);
    } else if (token.tag === "th" || token.tag === "td") {
      const align = ALIGN.exec(token.attrGet("style") || "");
      if (align) node.className = "align-" + align[1];
    }
    return node;
  }

  function codeBlock(token, open) {
    const pre = document.createElement("pre");
    const code = document.createElement("code");
    const language = (token.info || "").trim().split(/\s+/)[0];
    if (/^[\w+#.-]{1,32}$/.test(language)) code.dataset.language = language;
    code.textContent = token.content;
    pre.append(code);
    if (open) pre.classList.add("open");
    return pre;
  }

  // A token without children or pair: text, a break, inline code, a code block, a rule.
  function leaf(token, parent, openFence) {
    switch (token.type) {
      case "inline":
        build(token.children || [], parent, null);
        return;
      case "softbreak":
        if (!md.options.breaks) {
          parent.append("\n");
          return;
        }
      // falls through: with `breaks`, a newline in a paragraph is a line break, as the model wrote it
      case "hardbreak":
        parent.append(document.createElement("br"));
        return;
      case "code_inline": {
        const code = document.createElement("code");
        code.textContent = token.content;
        parent.append(code);
        return;
      }
      case "fence":
      case "code_block":
        parent.append(codeBlock(token, token === openFence));
        return;
      case "hr":
        parent.append(document.createElement("hr"));
        return;
      case "image": {
        // Inside a link (`[![badge](…)](…)`), the alt text is that link's text: a link in a link is not HTML,
        // and the inner one would take the click.
        const inLink = parent.closest !== undefined && parent.closest("a") !== null;
        const node = inLink ? document.createElement("span") : link(token.attrGet("src"), token.attrGet("title"));
        build(token.children || [], node, null); // the alt text
        if (!node.textContent) node.append(token.attrGet("src") || "image"); // no alt text: the link still shows
        parent.append(node);
        return;
      }
      default:
        if (token.content) parent.append(token.content); // text, and anything else: as text
    }
  }

  function build(tokens, root, openFence) {
    const stack = [root];
    for (const token of tokens) {
      const top = stack[stack.length - 1];
      if (token.nesting === 1) {
        const node = opened(token);
        if (node) top.append(node);
        stack.push(node || top);
      } else if (token.nesting === -1) {
        if (stack.length > 1) stack.pop();
      } else {
        leaf(token, top, openFence);
      }
    }
  }

  // The fence that runs to the end of the text without its closing line (the reply is still writing it), or null.
  function openFence(tokens, lines) {
    let end = tokens.length - 1;
    while (end >= 0 && tokens[end].nesting === -1) end--; // the lists or quotes the fence is in close after it
    const last = tokens[end];
    if (!last || last.type !== "fence" || !last.map || last.map[1] < lines.length) return null;
    if (last.map[1] - last.map[0] < 2) return last; // only the opening line so far
    const closing = lines[last.map[1] - 1].replace(/^[\s>]*/, "").trimEnd();
    const marker = last.markup[0];
    const closes = closing.length >= last.markup.length && [...closing].every((c) => c === marker);
    return closes ? null : last;
  }

  // The element a streaming cursor follows: the innermost last element that holds text.
  function markTail(root) {
    let node = root.lastElementChild;
    while (node && node.lastElementChild && !["BR", "HR"].includes(node.lastElementChild.tagName)) {
      node = node.lastElementChild;
    }
    if (node && node.tagName === "PRE" && node.firstElementChild) node = node.firstElementChild;
    if (node && !["BR", "HR"].includes(node.tagName)) node.classList.add("tail");
  }

  // `source` as elements in a fragment; `streaming`: the text is still growing (a fence it ends in is open).
  function renderFragment(source, streaming = true) {
    const text = source.replace(/\r\n?/g, "\n"); // as markdown-it reads lines
    const tokens = md.parse(text, {});
    const fragment = document.createDocumentFragment();
    const lines = text.replace(/\n$/, "").split("\n");
    build(tokens, fragment, streaming ? openFence(tokens, lines) : null);
    markTail(fragment);
    return fragment;
  }

  // Draw `source` into `element`, keeping each top-level block that is unchanged.
  function renderInto(element, source, streaming) {
    const fresh = Array.from(renderFragment(source, streaming).children);
    const old = Array.from(element.children);
    fresh.forEach((node, i) => {
      if (i < old.length && old[i].isEqualNode(node)) return;
      if (i < old.length) element.replaceChild(node, old[i]);
      else element.append(node);
    });
    for (let i = fresh.length; i < old.length; i++) old[i].remove();
  }

  // One element showing Markdown that grows: append() as text arrives, end() when no more will, set() for a whole
  // text at once. `around(draw)`, if given, runs each drawing (to keep the page scrolled to the end, say).
  class StreamingMarkdown {
    constructor(element, around = (draw) => draw()) {
      this.element = element;
      this.around = around;
      this.source = "";
      this.streaming = false;
      this.frame = 0;
      this.timer = 0;
      this.readyAt = 0; // performance.now() before which the next drawing waits
    }

    append(text) {
      this.source += text;
      this.streaming = true;
      this.schedule();
    }

    set(text) {
      this.source = text;
      this.end();
    }

    // The text is whole (the turn ended): draw it now, a fence it ends in no longer open.
    end() {
      this.streaming = false;
      this.flush();
    }

    schedule() {
      if (this.frame || this.timer) return;
      const wait = this.readyAt - performance.now();
      if (wait > 0) {
        this.timer = setTimeout(() => {
          this.timer = 0;
          this.schedule();
        }, wait);
      } else {
        this.frame = requestAnimationFrame(() => this.flush());
      }
    }

    // Draw now what has arrived (the end of a turn: what the page shows is then the whole text).
    flush() {
      cancelAnimationFrame(this.frame);
      clearTimeout(this.timer);
      this.frame = this.timer = 0;
      const started = performance.now();
      this.around(() => renderInto(this.element, this.source, this.streaming));
      const now = performance.now();
      this.readyAt = now + 2 * (now - started);
    }
  }

  window.ChatstreamMarkdown = { StreamingMarkdown, renderFragment };
})();
