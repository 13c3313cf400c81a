// The proof ledger's filters and sort order (chapters/ledger.md; tables by _ext/report_pages.py).
// Plain JavaScript, no server: it reads the rows' data-* attributes and hides rows, record-set
// columns and chapter sections. Without it the tables read as written.
(function () {
  "use strict";
  const box = document.getElementById("ledger-filters");
  const tables = [...document.querySelectorAll("table.ledger")];
  if (!box || !tables.length) return;
  const rows = tables.flatMap((t) => [...t.tBodies[0].rows]);
  rows.forEach((row, i) => { row.dataset.order = i; });  // page and line order, as written

  const sets = [...tables[0].tHead.querySelectorAll("th.set")].map((th) => ({
    cls: [...th.classList].find((c) => c.startsWith("set-")),
    label: th.innerText.replace(/\s+/g, " ").trim(),
  }));
  const uniq = (xs) => [...new Set(xs)];
  const statuses = [["held", "held"], ["not-run", "not run"], ["failed", "failed"],
                    ["stale", "stale"], ["no-record", "no record"]];

  function select(name, label, options) {
    const wrap = document.createElement("label");
    wrap.textContent = label;
    const sel = document.createElement("select");
    sel.name = name;
    for (const [value, text] of options) sel.add(new Option(text, value));
    sel.addEventListener("change", apply);
    wrap.appendChild(sel);
    box.appendChild(wrap);
    return sel;
  }
  const all = [["", "all"]];
  const chapter = select("chapter", "chapter",
    all.concat(tables.map((t) => [t.dataset.chapter, t.dataset.chapter])));
  const page = select("page", "page",
    all.concat(uniq(rows.map((r) => r.dataset.page)).map((p) => [p, p.split("/")[1]])));
  const set = select("set", "record set", all.concat(sets.map((s) => [s.cls, s.label])));
  const dtype = select("dtype", "dtype", all.concat(uniq(rows.flatMap(
    (r) => r.dataset.dtype ? r.dataset.dtype.split(", ") : [])).sort().map((d) => [d, d])));
  const status = select("status", "status", all.concat(statuses));
  const sort = select("sort", "sort by", [["order", "page and line"],
    ["max-abs-desc", "discrepancy (max abs), largest first"],
    ["max-abs-asc", "discrepancy (max abs), smallest first"]]);
  const count = document.createElement("span");
  count.className = "ledger-count";
  count.setAttribute("aria-live", "polite");
  box.appendChild(count);

  // The discrepancy a row sorts by: of the chosen record set, else the largest of all sets.
  function maxAbs(row) {
    const x = set.value ? (row.dataset.setMaxAbs || "").split(" ")[set.selectedIndex - 1]
                        : row.dataset.maxAbs;
    return x === undefined || x === "-" ? NaN : parseFloat(x);
  }

  function apply() {
    const cells = (row) => set.value ? [row.querySelector("td." + set.value)]
                                     : [...row.querySelectorAll("td.set")];
    let shown = 0;
    for (const table of tables) {
      let visible = 0;
      for (const row of table.tBodies[0].rows) {
        const show = (!chapter.value || table.dataset.chapter === chapter.value) &&
          (!page.value || row.dataset.page === page.value) &&
          (!dtype.value || (row.dataset.dtype || "").split(", ").includes(dtype.value)) &&
          (!status.value || cells(row).some((td) => td && td.classList.contains(status.value)));
        row.classList.toggle("ledger-hidden", !show);
        visible += show;
      }
      shown += visible;
      for (const s of sets) {  // a chosen record set: only its column
        for (const el of table.querySelectorAll("." + s.cls)) {
          el.classList.toggle("ledger-hidden", !!set.value && s.cls !== set.value);
        }
      }
      (table.closest("section") || table).classList.toggle("ledger-hidden", !visible);
      const body = table.tBodies[0];
      const sorted = [...body.rows].sort((a, b) => {
        if (sort.value !== "order") {
          const x = maxAbs(a), y = maxAbs(b);
          if (isNaN(x) !== isNaN(y)) return isNaN(x) ? 1 : -1;  // no number: last
          if (!isNaN(x) && x !== y) return sort.value === "max-abs-desc" ? y - x : x - y;
        }
        return a.dataset.order - b.dataset.order;
      });
      body.append(...sorted);
    }
    count.textContent = `${shown} of ${rows.length} claims shown`;
    // The filters live in the address (?page=normalization/plot_04_layernorm&dtype=...), so
    // a page's "this page in the proof ledger" link and a copied address open them as set.
    const query = new URLSearchParams();
    for (const sel of selects) {
      if (sel.value && sel.value !== "order") query.set(sel.name, sel.value);
    }
    const search = query.toString() ? "?" + query : "";
    if (search !== location.search) {
      try {
        history.replaceState(null, "", location.pathname + search + location.hash);
      } catch (e) { /* some browsers refuse it for file:// pages: the filters still apply */ }
    }
  }
  // Filters from the address; a value that names no option (a page that is gone) is ignored.
  const selects = [chapter, page, set, dtype, status, sort];
  const given = new URLSearchParams(location.search);
  for (const sel of selects) {
    const value = given.get(sel.name);
    if (value !== null && [...sel.options].some((o) => o.value === value)) sel.value = value;
  }
  apply();
})();
