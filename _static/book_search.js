// Search results quote each page's text, taken from its HTML before MathJax typesets it, so
// inline math showed as "\(i\)". Show the math's source without its delimiters: "i".
// A result found through a page's index entry (`.. index:: ! RoPE`, which ranks the page
// that teaches a topic first) points at the entry's empty target: Sphinx 9 then quotes
// nothing and fails on appending no summary. Quote the page's text instead.
document.addEventListener("DOMContentLoaded", () => {
  if (typeof Search === "undefined" || !Search.htmlToText) return; // not the search page
  const htmlToText = Search.htmlToText;
  const text = (html, anchor) => {
    const found = htmlToText(html, anchor);
    return anchor && !found.trim() ? htmlToText(html) : found;
  };
  Search.htmlToText = (html, anchor) =>
    text(html, anchor)
      .replace(/\\\(\s*([\s\S]*?)\s*\\\)/g, "$1")
      .replace(/\\\[\s*([\s\S]*?)\s*\\\]/g, "$1");
});
