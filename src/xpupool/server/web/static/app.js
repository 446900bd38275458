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

  // The submit form as you type: the whole form is posted (a POST with its CSRF secret: its
  // text, env values included, never goes into a URL) and the server answers what submitting it
  // would refuse now, at the field to show it at; every other field's message is cleared.
  function validate(form) {
    let timer = 0;
    let asked = 0;
    async function check() {
      const mine = ++asked;
      try {
        const r = await fetch(form.dataset.validate, {
          method: "POST", credentials: "same-origin", body: new URLSearchParams(new FormData(form)),
        });
        if (r.status === 401) { window.location.assign("/signin"); return; }
        if (!r.ok || mine !== asked) return; // a later keystroke's answer is the one to show
        const body = await r.json();
        document.querySelectorAll(".field-error").forEach((out) => {
          const name = out.id.replace(/-error$/, "");
          const here = !body.ok && body.at === name;
          out.textContent = here ? (body.field ? body.field + ": " : "") + body.reason : "";
          const input = document.getElementById(name);
          if (input && input.form === form) input.setAttribute("aria-invalid", here ? "true" : "false");
        });
        form.dataset.checked = String(mine);
      } catch (e) { /* the form is checked again on submit */ }
    }
    const later = () => { window.clearTimeout(timer); timer = window.setTimeout(check, 300); };
    form.addEventListener("input", later);
    form.addEventListener("change", later);
  }

  document.addEventListener("DOMContentLoaded", () => {
    document.querySelectorAll("[data-poll]").forEach(poll);
    document.querySelectorAll("pre[data-log]").forEach(tail);
    document.querySelectorAll("form[data-validate]").forEach(validate);
  });
})();
