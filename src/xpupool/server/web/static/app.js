// xpupool dashboard: a little plain JavaScript, no build step. Everything it inserts that came
// from data goes in as text (textContent, createTextNode); refreshed fragments are HTML the
// server rendered with every string escaped.
"use strict";
(function () {
  function poll(el) {
    const every = (Number(el.dataset.every) || 5) * 1000;
    async function tick() {
      if (!document.hidden && !el.contains(document.activeElement)) {
        try {
          const r = await fetch(el.dataset.poll, { credentials: "same-origin" });
          if (r.status === 401) { window.location.assign("/signin"); return; }
          if (r.ok) {
            const doc = new DOMParser().parseFromString(await r.text(), "text/html");
            el.replaceChildren(...Array.from(doc.body.childNodes, (n) => document.importNode(n, true)));
            el.dataset.updated = String(Date.now());
          }
        } catch (e) { /* keep the last view; the next tick tries again */ }
      }
      window.setTimeout(tick, every);
    }
    window.setTimeout(tick, every);
  }

  function tail(pre) {
    const cap = 200000; // characters kept on the page: one text node, bounded
    let offset = 0;
    async function tick() {
      try {
        const r = await fetch(pre.dataset.log + "?replica=" + (pre.dataset.replica || "0") + "&offset=" + offset, { credentials: "same-origin" });
        if (r.ok) {
          const text = await r.text();
          offset = Number(r.headers.get("X-Next-Offset") || offset);
          // a job that had finished when the page opened writes no more: stop once read to the end
          if (!text && pre.dataset.final === "true") return;
          if (text) {
            let all = (pre.textContent || "") + text;
            if (all.length > cap) all = all.slice(all.length - cap);
            pre.textContent = all;
            pre.dataset.offset = String(offset);
          }
        }
      } catch (e) { /* try again */ }
      window.setTimeout(tick, 2000);
    }
    tick();
  }

  function validate(input) {
    const out = document.getElementById(input.dataset.errorId);
    let timer = 0;
    async function check() {
      const url = input.dataset.validate + "?request=" + encodeURIComponent(input.value);
      try {
        const r = await fetch(url, { credentials: "same-origin" });
        if (!r.ok) return;
        const body = await r.json();
        out.textContent = body.ok ? "" : (body.field ? body.field + ": " : "") + body.reason;
        input.setAttribute("aria-invalid", body.ok ? "false" : "true");
        input.dataset.checked = input.value;
      } catch (e) { /* the form is checked again on submit */ }
    }
    input.addEventListener("input", () => { window.clearTimeout(timer); timer = window.setTimeout(check, 250); });
  }

  document.addEventListener("DOMContentLoaded", () => {
    document.querySelectorAll("[data-poll]").forEach(poll);
    document.querySelectorAll("pre[data-log]").forEach(tail);
    document.querySelectorAll("input[data-validate]").forEach(validate);
  });
})();
