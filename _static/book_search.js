// Search results quote each page's text, taken from its HTML before MathJax typesets it, so
// inline math showed as "\(i\)". Show the math's source without its delimiters: "i".
// A gallery page's text begins with sphinx-gallery's note "Go to the end to download the
// full example code", which the quote of a page found by its title showed first: dropped.
// Opened from disk (file://), the browser lets no page fetch another, so each result's
// quote failed with an error in the console: there the results are listed without quotes
// (`make serve` serves the site over HTTP, with them).
if (typeof DOCUMENTATION_OPTIONS !== "undefined" && location.protocol === "file:")
  DOCUMENTATION_OPTIONS.SHOW_SEARCH_SUMMARY = false;
document.addEventListener("DOMContentLoaded", () => {
  if (typeof Search === "undefined" || !Search.htmlToText) return; // not the search page
  const htmlToText = Search.htmlToText;
  const withoutNote = (html) => {
    const doc = new DOMParser().parseFromString(html, "text/html");
    doc.querySelectorAll(".sphx-glr-download-link-note").forEach((el) => el.remove());
    return doc.documentElement.outerHTML;
  };
  Search.htmlToText = (html, anchor) =>
    htmlToText(withoutNote(html), anchor)
      .replace(/\\\(\s*([\s\S]*?)\s*\\\)/g, "$1")
      .replace(/\\\[\s*([\s\S]*?)\s*\\\]/g, "$1");
});
