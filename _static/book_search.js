// Search results quote each page's text, taken from its HTML before MathJax typesets it, so
// inline math showed as "\(i\)". Show the math's source without its delimiters: "i".
document.addEventListener("DOMContentLoaded", () => {
  if (typeof Search === "undefined" || !Search.htmlToText) return; // not the search page
  const htmlToText = Search.htmlToText;
  Search.htmlToText = (html, anchor) =>
    htmlToText(html, anchor)
      .replace(/\\\(\s*([\s\S]*?)\s*\\\)/g, "$1")
      .replace(/\\\[\s*([\s\S]*?)\s*\\\]/g, "$1");
});
