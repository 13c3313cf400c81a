"""The book's developer tools (not part of the site); run them from the repository root."""
