// Server-Sent Events parsing for fetch() streams, after the WHATWG HTML "event stream" rules:
// UTF-8 decoded across chunk boundaries (a leading BOM dropped), lines ended by CRLF, CR or LF (a CRLF
// split between two chunks is one line end), ":" comments ignored, "field: value" with one optional
// space after the colon, "data" lines joined with "\n", "id" kept until changed (ignored if it holds
// NUL), "retry" taken only when it is all digits, and an event dispatched only on a blank line, so an
// event cut off by a dropped connection is never delivered half-read.
"use strict";

(function (global) {
  class SseParser {
    constructor() {
      this.decoder = new TextDecoder("utf-8");
      this.pending = ""; // an unterminated line
      this.afterCR = false; // the last chunk ended with CR: a LF that starts the next one belongs to it
      this.data = null; // the data buffer; null while the event has no data line
      this.type = "";
      this.lastEventId = "";
      this.retry = null; // the reconnection time (ms) the server asked for, if any
      this.comments = 0;
    }

    // Feed a chunk (Uint8Array from a stream, or a string); returns the events it completed, in order.
    push(chunk) {
      const text = typeof chunk === "string" ? chunk : this.decoder.decode(chunk, { stream: true });
      return this.lines(text);
    }

    // The stream ended: an unterminated line, and an event not ended by a blank line, are dropped.
    end() {
      const events = this.lines(this.decoder.decode());
      this.pending = "";
      this.data = null;
      this.type = "";
      return events;
    }

    lines(text) {
      const events = [];
      let start = 0;
      if (this.afterCR && text.startsWith("\n")) start = 1;
      this.afterCR = false;
      for (let i = start; i < text.length; i++) {
        const c = text.charCodeAt(i);
        if (c !== 10 && c !== 13) continue;
        this.line(this.pending + text.slice(start, i), events);
        this.pending = "";
        if (c === 13) {
          if (i + 1 === text.length) this.afterCR = true;
          else if (text.charCodeAt(i + 1) === 10) i++;
        }
        start = i + 1;
      }
      this.pending += text.slice(start);
      return events;
    }

    line(line, events) {
      if (line === "") {
        this.dispatch(events);
        return;
      }
      if (line.startsWith(":")) {
        this.comments += 1;
        return;
      }
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? "" : line.slice(colon + 1);
      if (value.startsWith(" ")) value = value.slice(1);
      if (field === "data") this.data = this.data === null ? value : this.data + "\n" + value;
      else if (field === "event") this.type = value;
      else if (field === "id") {
        if (!value.includes("\0")) this.lastEventId = value;
      } else if (field === "retry") {
        if (/^[0-9]+$/.test(value)) this.retry = Number(value);
      }
    }

    dispatch(events) {
      if (this.data !== null) {
        events.push({ type: this.type || "message", data: this.data, lastEventId: this.lastEventId });
      }
      this.data = null;
      this.type = "";
    }
  }

  // The relay's event ids (docs/HTTP_API.md, "Event ids"): "<seq>" (a whole record) or "<seq>.<offset>" (a
  // piece of one). Ordered by seq, then offset, a whole record after every piece of it; null for what is not one.
  function eventPosition(id) {
    const match = /^([0-9]+)(?:\.([0-9]+))?$/.exec(id);
    if (!match) return null;
    return [Number(match[1]), match[2] === undefined ? Infinity : Number(match[2])];
  }

  // Whether the event id `a` comes after `b` (b null: before everything).
  function isAfter(a, b) {
    const pa = eventPosition(a);
    const pb = b === null ? null : eventPosition(b);
    if (pa === null) return true; // not an id of ours: show it rather than lose it
    if (pb === null) return true;
    return pa[0] > pb[0] || (pa[0] === pb[0] && pa[1] > pb[1]);
  }

  global.ChatstreamSse = Object.freeze({ SseParser, eventPosition, isAfter });
})(window);
