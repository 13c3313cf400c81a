// The proof ledger's filters, search and sort order (chapters/ledger.md; the table by
// _ext/report_pages.py). Plain JavaScript, no server: it reads the rows' data-* attributes
// and hides rows and record-set columns. Without it the table reads as written, in the
// book's order.
(function () {
  "use strict";
  const box = document.getElementById("ledger-filters");
  const table = document.querySelector("table.ledger");
  if (!box || !table) return;
  const body = table.tBodies[0];
  const rows = [...body.rows];
  rows.forEach((row, i) => { row.dataset.order = i; });  // the book's order, as written

  const sets = [...table.tHead.querySelectorAll("th.set")].map((th) => ({
    cls: [...th.classList].find((c) => c.startsWith("set-")),
    label: th.innerText.replace(/\s+/g, " ").trim(),
  }));
  const uniq = (xs) => [...new Set(xs)];
  const statuses = [["held", "held"], ["not-run", "not run"], ["failed", "failed"],
                    ["stale", "stale"], ["no-record", "no record"]];
  const all = [["", "all"]];

  function control(element, name, label) {
    const wrap = document.createElement("label");
    wrap.textContent = label;
    element.name = name;
    element.addEventListener(element.tagName === "INPUT" ? "input" : "change", apply);
    wrap.appendChild(element);
    box.appendChild(wrap);
    return element;
  }
  function select(name, label, options) {
    const sel = document.createElement("select");
    for (const [value, text] of options) sel.add(new Option(text, value));
    return control(sel, name, label);
  }
  const search = document.createElement("input");
  search.type = "search";
  search.placeholder = "words of a claim, a page, a section";
  control(search, "q", "search");
  const chapters = uniq(rows.map((r) => r.dataset.chapter));
  const titles = JSON.parse(box.dataset.chapters || "{}");  // chapter -> its title
  const chapter = select("chapter", "chapter",
                         all.concat(chapters.map((c) => [c, titles[c] || c])));
  // The pages by title, grouped by chapter, in the book's order.
  const page = select("page", "page", all);
  for (const c of chapters) {
    const group = document.createElement("optgroup");
    group.label = titles[c] || c;
    const seen = new Set();
    for (const r of rows.filter((r) => r.dataset.chapter === c)) {
      if (seen.has(r.dataset.page)) continue;
      seen.add(r.dataset.page);
      group.appendChild(new Option(r.dataset.title, r.dataset.page));
    }
    page.appendChild(group);
  }
  const set = select("set", "record set", all.concat(sets.map((s) => [s.cls, s.label])));
  const dtype = select("dtype", "dtype", all.concat(uniq(rows.flatMap(
    (r) => r.dataset.dtype ? r.dataset.dtype.split(", ") : [])).sort().map((d) => [d, d])));
  const status = select("status", "status", all.concat(statuses));
  const role = select("role", "role", all.concat([["check", "checks"],
                                                  ["control", "negative controls"]]));
  const sort = select("sort", "sort by", [["order", "the book's order"],
    ["ratio-desc", "closest to failing (discrepancy / tolerance)"],
    ["max-abs-desc", "discrepancy (max abs), largest first"],
    ["max-abs-asc", "discrepancy (max abs), smallest first"]]);
  const count = document.createElement("span");
  count.className = "ledger-count";
  count.setAttribute("aria-live", "polite");
  box.appendChild(count);

  // The number a row sorts by: of the chosen record set, else the largest of all sets.
  function number(row, key) {
    const each = (row.dataset["set" + key] || "").split(" ");
    const x = set.value ? each[set.selectedIndex - 1]
                          : row.dataset[key[0].toLowerCase() + key.slice(1)];
    return x === undefined || x === "-" ? NaN : parseFloat(x);
  }
  const key = () => (sort.value === "ratio-desc" ? "Ratio" : "MaxAbs");
  const lower = (s) => s.toLowerCase();

  function apply() {
    const cells = (row) => set.value ? [row.querySelector("td." + set.value)]
                                     : [...row.querySelectorAll("td.set")];
    const words = lower(search.value).split(/\s+/).filter(Boolean);
    let shown = 0;
    for (const row of rows) {
      const text = words.length ? lower(row.textContent + " " + row.dataset.page) : "";
      const show = (!chapter.value || row.dataset.chapter === chapter.value) &&
        (!page.value || row.dataset.page === page.value) &&
        (!dtype.value || (row.dataset.dtype || "").split(", ").includes(dtype.value)) &&
        (!status.value || cells(row).some((td) => td && td.classList.contains(status.value))) &&
        (!role.value || row.dataset.role === role.value) &&
        words.every((w) => text.includes(w));
      row.classList.toggle("ledger-hidden", !show);
      shown += show;
    }
    for (const s of sets) {  // a chosen record set: only its column
      for (const el of table.querySelectorAll("." + s.cls)) {
        el.classList.toggle("ledger-hidden", !!set.value && s.cls !== set.value);
      }
    }
    const sorted = [...rows].sort((a, b) => {
      if (sort.value !== "order") {
        const x = number(a, key()), y = number(b, key());
        if (isNaN(x) !== isNaN(y)) return isNaN(x) ? 1 : -1;  // no number: last
        if (!isNaN(x) && x !== y) return sort.value === "max-abs-asc" ? x - y : y - x;
      }
      return a.dataset.order - b.dataset.order;
    });
    // Rows moved only when the order changes (moving a thousand rows costs a layout).
    if (sorted.some((row, i) => row !== body.rows[i])) body.append(...sorted);
    count.textContent = `${shown} of ${rows.length} claims shown`;
    // The filters live in the address (?page=normalization/plot_04_layernorm&sort=...), so
    // a page's "this page in the proof ledger" link and a copied address open them as set.
    const query = new URLSearchParams();
    for (const el of controls) {
      if (el.value && el.value !== "order") query.set(el.name, el.value);
    }
    const address = query.toString() ? "?" + query : "";
    if (address !== location.search) {
      try {
        history.replaceState(null, "", location.pathname + address + location.hash);
      } catch (e) { /* some browsers refuse it for file:// pages: the filters still apply */ }
    }
  }
  // Filters from the address; a value that names no option (a page that is gone) is ignored.
  const controls = [search, chapter, page, set, dtype, status, role, sort];
  const given = new URLSearchParams(location.search);
  for (const el of controls) {
    const value = given.get(el.name);
    if (value === null) continue;
    if (el.tagName === "INPUT" || [...el.options].some((o) => o.value === value)) {
      el.value = value;
    }
  }
  apply();
})();
